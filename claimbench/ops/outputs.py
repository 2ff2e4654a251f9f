"""The structured outputs of the MCP tools: pydantic models, so each tool lists its schema."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from claimbench.harness import scoring
from claimbench.harness.calibration import Calibration
from claimbench.harness.run_info import RunInfo


class ClaimRow(BaseModel):
    id: str
    part: int
    title: str
    confidence: float
    scope: str
    status: str  # the verdict once run, else "not run" or "no experiment yet"


class ClaimList(BaseModel):
    claims: list[ClaimRow]


class ConditionOut(BaseModel):
    condition: str  # "capacity_ratio >= 1.9"
    basis: str
    estimate: float | None
    ci_lo: float | None
    ci_hi: float | None
    num_trials: int
    evidence: str | None
    in_scope: bool
    status: str

    @classmethod
    def of(cls, cs: Any) -> ConditionOut:
        """From a scoring ConditionScore."""
        return cls(
            condition=str(cs.condition),
            basis=cs.condition.basis,
            estimate=cs.estimate,
            ci_lo=cs.ci_lo,
            ci_hi=cs.ci_hi,
            num_trials=cs.num_trials,
            evidence=cs.evidence,
            in_scope=cs.in_scope,
            status=cs.status,
        )


class ScoreOut(BaseModel):
    id: str
    confidence: float
    scope: str
    verdict: str
    decided: bool
    headline_evidence: str | None
    shown_run: str | None
    conditions: list[ConditionOut]

    @classmethod
    def of(cls, s: scoring.ClaimScore) -> ScoreOut:
        return cls(
            id=s.claim.id,
            confidence=s.claim.confidence,
            scope=s.claim.scope,
            verdict=s.verdict,
            decided=s.decided,
            headline_evidence=s.headline.evidence if s.headline else None,
            shown_run=s.shown.run_id if s.shown else None,
            conditions=[ConditionOut.of(cs) for cs in s.conditions],
        )


class ClaimDetail(BaseModel):
    id: str
    part: int
    title: str
    statement: str
    confidence: float
    scope: str
    prediction: list[str]
    refuted_if: str
    params: dict[str, Any]
    status: str
    score: ScoreOut
    runs: list[RunInfo]  # every run of the claim, each with its provenance


class Scores(BaseModel):
    claims: list[ScoreOut]
    calibration: Calibration
    totals: dict[str, int]
    num_runs: int


class RunList(BaseModel):
    runs: list[RunInfo]  # newest first
    num_skipped: int  # unreadable run directories (left as they are)


class Budget(BaseModel):
    budget_usd: float
    spent_usd: float
    remaining_usd: float
    num_runs: int
    device_s: float
    num_unpriced: int
    per_claim: list[dict[str, Any]]  # $/Mtok per claim and chip (budget.per_mtok_table)
    runs_not_in_ledger: list[str]


class DoctorOut(BaseModel):
    ok: bool
    model: str
    dtype: str
    prompt: str
    engine_tokens: list[int]
    reference_tokens: list[int]
    engine_text: str
    reference_text: str


class JobOut(BaseModel):
    job_id: str
    kind: str
    state: str  # running | done | failed | cancelled
    started_at: str
    elapsed_s: float
    progress: dict[str, Any]  # runs: claim i of n, trial i of n
    stored: list[dict[str, Any]]  # runs stored so far
    result: dict[str, Any] | None
    error: str | None


class Written(BaseModel):
    path: str  # relative to the project root
    summary: str


class Health(BaseModel):
    url: str
    status_code: int
    ready: bool
    body: dict[str, Any] | str


class TenantMetrics(BaseModel):
    tenant: str
    samples: dict[str, float]  # metric (histograms as _count and _sum) -> value


class Metrics(BaseModel):
    url: str
    tenants: list[TenantMetrics]
