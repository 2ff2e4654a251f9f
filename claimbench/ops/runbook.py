"""The runbook's steps as MCP tools: each a thin call into the library code the CLI calls.

No tool takes a path, a URL or a shell string: the project root, results store, model and the
serving URL are the operator's (`claimbench mcp` options); an agent names only claims, chips,
profiles, buckets and jobs. The over-budget override of `claimbench run` is not here at all.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from pydantic import Field

from claimbench.engine.config import KV_DTYPES, WEIGHT_FORMATS
from claimbench.harness import registry, results
from claimbench.harness.claims import PROFILES, Claim, ClaimsError, find_claim, load_claims
from claimbench.harness.run_info import RunInfo
from claimbench.kernels.backend import BACKENDS
from claimbench.ledger import metered_lock
from claimbench.ledger.spend_gate import SpendPlan
from claimbench.ops import outputs, remote, service
from claimbench.ops.agents import Agent
from claimbench.ops.jobs import Job, JobManager
from claimbench.ops.scopes import CHECK, RUN, SPEND, TOOL_SCOPES
from claimbench.tpucompile.check import TPU_CHIPS

# The agent of the call being served, set by the guard (ops/guard.py) for the tool's duration.
current_agent: ContextVar[Agent | None] = ContextVar("current_agent", default=None)

ClaimId = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=64)]
JobId = Annotated[str, Field(pattern=r"^job-[0-9a-f]{8}$")]
# Choices from the tables they index, so each tool's schema lists exactly what is known.
Profile = Literal[PROFILES]
TpuChip = Literal[TPU_CHIPS]
Weights = Literal[WEIGHT_FORMATS]
KvDtype = Literal[KV_DTYPES]
AttentionBackend = Literal[BACKENDS]
# ASCII digits and spaces spelled out: \d and \s also match other scripts' digits and newlines.
Buckets = Annotated[str, Field(pattern=r"^ *[0-9]+x[0-9]+( *, *[0-9]+x[0-9]+)* *$", max_length=200)]


@dataclass(frozen=True)
class OpsConfig:
    """What the operator fixed when starting `claimbench mcp`."""

    root: Path  # the claims project
    model: Path | None  # the model experiments and doctor load (None: the shipped one)
    dtype: str
    server_url: str | None  # a running `claimbench serve`, for server_health/server_metrics
    # The serve's /metrics key (from a file or the environment); kept out of reprs and logs.
    metrics_key: str | None = field(default=None, repr=False)

    @property
    def store(self) -> Path:
        return self.root / "results"


def _relative(root: Path, path: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _job_out(job: Job) -> outputs.JobOut:
    return outputs.JobOut(
        job_id=job.job_id,
        kind=job.kind,
        state=job.state,
        started_at=job.started_at,
        elapsed_s=round(job.elapsed_s, 3),
        progress=dict(job.progress),
        stored=list(job.stored),
        result=job.result,
        error=job.error,
    )


@contextmanager
def _invalid_params() -> Iterator[None]:
    """A service's one-line refusal as the tool's invalid-params error."""
    try:
        yield
    except service.ServiceError as err:
        raise MCPError(INVALID_PARAMS, str(err)) from None


def _agent_name() -> str:
    agent = current_agent.get()
    return agent.name if agent is not None else "-"


class Runbook:
    """The tools, bound to one project and one job manager."""

    def __init__(self, config: OpsConfig, jobs: JobManager) -> None:
        self.config = config
        self.jobs = jobs
        # Tools run on worker threads: a run's busy check and its start happen under this,
        # so two calls at once cannot both find no running job.
        self._start_lock = threading.Lock()

    # -- shared look-ups -------------------------------------------------------------------

    def _claims(self) -> list[Claim]:
        try:
            return load_claims(self.config.root)
        except ClaimsError as err:
            raise MCPError(INVALID_PARAMS, str(err)) from None

    def _claim(self, claim_id: str) -> Claim:
        try:
            return find_claim(self._claims(), claim_id)
        except ValueError as err:
            raise MCPError(INVALID_PARAMS, str(err)) from None

    def _runs(self) -> list[results.StoredRun]:
        return results.read_runs(self.config.store)[0]

    def _own_job(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None or job.agent != _agent_name():
            raise MCPError(INVALID_PARAMS, f"no job {job_id!r} of this agent")
        return job

    def spend_plan(self, claim_ids: list[str], profile: str, trials: int | None) -> SpendPlan:
        """The budget gate's answer for a run (ledger/spend_gate.py)."""
        selected = [self._claim(c) for c in claim_ids]
        with _invalid_params():
            return service.spend_plan(
                self.config.root, self.config.store, selected, profile, trials
            )

    def needed_scopes(self, tool: str, arguments: dict[str, Any]) -> tuple[str, ...]:
        """The scopes a call needs: the tool's own, spend for a run the ledger prices above
        zero, and for job_cancel the scope the job was started under."""
        if tool == "job_cancel":
            job = self.jobs.get(str(arguments.get("job_id")))
            if job is not None and job.agent == _agent_name():
                return (job.scope,)
        scope = TOOL_SCOPES[tool]
        if tool == "run_claims":
            claim_ids = arguments.get("claims")
            try:
                plan = self.spend_plan(
                    list(claim_ids) if isinstance(claim_ids, list) else [],
                    str(arguments.get("profile", "quick")),
                    None,
                )
            except MCPError:
                return (scope,)  # the call itself reports the bad input
            if plan.metered:
                return (scope, SPEND)
        return (scope,)

    # -- read ------------------------------------------------------------------------------

    def list_claims(self) -> outputs.ClaimList:
        """Every claim: id, part, title, confidence, scope and status (verdict once run)."""
        root = self.config.root
        scores = service.score_project(root, self._claims(), self._runs()).scores
        return outputs.ClaimList(
            claims=[
                outputs.ClaimRow(
                    id=s.claim.id,
                    part=s.claim.part,
                    title=s.claim.title,
                    confidence=s.claim.confidence,
                    scope=s.claim.scope,
                    status=registry.claim_status(root, s.claim, s.verdict),
                )
                for s in scores
            ]
        )

    def show_claim(self, claim_id: ClaimId) -> outputs.ClaimDetail:
        """One claim: statement, prediction, what refutes it, its score and its runs."""
        claim = self._claim(claim_id)
        (score,) = service.score_project(self.config.root, [claim], self._runs()).scores
        return outputs.ClaimDetail(
            id=claim.id,
            part=claim.part,
            title=claim.title,
            statement=claim.statement,
            confidence=claim.confidence,
            scope=claim.scope,
            prediction=[str(c) for c in claim.prediction],
            refuted_if=claim.refuted_if,
            params=claim.params,
            status=registry.claim_status(self.config.root, claim, score.verdict),
            score=outputs.ScoreOut.of(score),
            runs=[run.info for group in score.groups for run in group.runs],
        )

    def get_scores(self) -> outputs.Scores:
        """Every claim's verdict and conditions, and calibration, from the stored runs
        (computed, not written: `score` writes scores.parquet)."""
        scored = service.score_project(self.config.root, self._claims(), self._runs())
        return outputs.Scores(
            claims=[outputs.ScoreOut.of(s) for s in scored.scores],
            calibration=scored.calibration,
            totals=scored.totals,
            num_runs=scored.num_runs,
        )

    def list_runs(
        self, claim_id: ClaimId | None = None, limit: Annotated[int, Field(ge=1, le=500)] = 50
    ) -> outputs.RunList:
        """Stored runs, newest first, each with its provenance (hardware, model, git, profile)."""
        runs, skipped = results.read_runs(self.config.store)
        infos = [RunInfo.from_meta(r.meta) for r in runs if claim_id in (None, r.claim_id)]
        infos.sort(key=lambda i: i.end or "", reverse=True)
        return outputs.RunList(runs=infos[:limit], num_skipped=len(skipped))

    def get_budget(self) -> outputs.Budget:
        """Dollars spent against the budget, and $/Mtok per claim and chip, from the ledger."""
        with _invalid_params():
            report = service.budget(self.config.root, self.config.store).to_json()
        return outputs.Budget(**{name: report[name] for name in outputs.Budget.model_fields})

    def get_env(self) -> dict[str, Any]:
        """The platform JAX runs on, its devices, chip and library versions."""
        from claimbench.hardware.chips import detect

        return detect()

    def job_status(self, job_id: JobId) -> outputs.JobOut:
        """A job of this agent: state, progress (claim i of n, trial i of n), elapsed, result."""
        return _job_out(self._own_job(job_id))

    # -- check -----------------------------------------------------------------------------

    def doctor(self, attention_backend: AttentionBackend = "auto") -> outputs.DoctorOut:
        """The offline golden check: the engine's greedy completion against a dense forward
        pass of the same weights; ok means the deployment generates correct output."""
        from claimbench.serving.monitoring.golden_check import golden_check

        try:
            check = golden_check(self.config.model, self.config.dtype, attention_backend)
        except (ValueError, FileNotFoundError) as err:
            raise MCPError(INVALID_PARAMS, str(err).splitlines()[0]) from None
        return outputs.DoctorOut(
            ok=check.ok,
            model=str(check.model_path),
            dtype=check.dtype,
            prompt=check.prompt,
            engine_tokens=check.engine_tokens,
            reference_tokens=check.reference_tokens,
            engine_text=check.engine_text,
            reference_text=check.reference_text,
        )

    def tpu_check(
        self,
        chip: TpuChip,
        profile: Profile = "quick",
        buckets: Buckets | None = None,
        tp: Annotated[int, Field(ge=1, le=8)] = 1,
        weights: Weights = "bf16",
        kv_dtype: KvDtype = "auto",
    ) -> outputs.JobOut:
        """Start compiling the engine step for a TPU chip through libtpu (no chip needed); a
        job: poll job_status for the per-bucket report (compile s, HBM, copies)."""
        from claimbench.tpucheck.setup import check_setup
        from claimbench.tpucompile import check as tpu_check

        try:
            check_setup(
                self.config.root,
                profile,
                tp=tp,
                buckets=buckets,
                weights=weights,
                kv_dtype=kv_dtype,
            )
        except ValueError as err:
            raise MCPError(INVALID_PARAMS, str(err).splitlines()[0]) from None
        if (reason := tpu_check.libtpu_unavailable()) is not None:
            raise MCPError(INVALID_PARAMS, reason)
        spec = {
            "root": str(self.config.root),
            "chip": chip,
            "profile": profile,
            "buckets": buckets,
            "tp": tp,
            "weights": weights,
            "kv_dtype": kv_dtype,
        }
        return _job_out(self.jobs.start("tpu_check", spec, agent=_agent_name(), scope=CHECK))

    def server_health(self) -> outputs.Health:
        """The configured server's /health/ready: ready only if it generates its golden output."""
        return self._reach(remote.health)

    def server_metrics(self) -> outputs.Metrics:
        """The configured server's /metrics, summarized per tenant."""
        return self._reach(lambda url: remote.metrics(url, self.config.metrics_key))

    def _reach(self, read: Callable[[str], Any]) -> Any:
        import httpx

        url = self._server_url()
        try:
            return read(url)
        except httpx.HTTPError as err:
            raise MCPError(INTERNAL_ERROR, f"{url}: {type(err).__name__}: {err}") from None

    def _server_url(self) -> str:
        if self.config.server_url is None:
            raise MCPError(
                INVALID_PARAMS, "no server configured: start `claimbench mcp --server-url URL`"
            )
        return self.config.server_url

    # -- run -------------------------------------------------------------------------------

    def run_claims(
        self,
        claims: Annotated[list[ClaimId], Field(min_length=1, max_length=64)],
        profile: Profile = "quick",
        trials: Annotated[int, Field(ge=1, le=100)] | None = None,
        seed: int = 0,
    ) -> outputs.JobOut:
        """Start running claims' experiments (a job: poll job_status). Refused when the
        estimated cost exceeds the remaining budget; a run on a metered chip needs spend."""
        for claim_id in claims:
            if not registry.has_experiment(self.config.root, self._claim(claim_id)):
                raise MCPError(INVALID_PARAMS, f"claim {claim_id!r}: no experiment yet")
        plan = self.spend_plan(claims, profile, trials)
        if plan.blocked is not None:
            raise MCPError(INVALID_PARAMS, f"refused: {plan.blocked}")
        spec = {
            "root": str(self.config.root),
            "results_dir": str(self.config.store),
            "claims": list(dict.fromkeys(claims)),
            "profile": profile,
            "trials": trials,
            "seed": seed,
            "dtype": self.config.dtype,
            "model": str(self.config.model) if self.config.model else None,
        }
        # A running job's spend reaches the ledger only when its runs finish: two metered jobs
        # that each fit the remaining budget could overspend it together. A job is registered
        # only once its worker is launched, so the check and the start are one step. Across
        # processes (another server, `claimbench run`) the store's metered-run lock decides:
        # taken here, handed to the worker, which holds it until it exits.
        with self._start_lock:
            busy = self.jobs.running("run_claims")
            if plan.metered and busy:
                raise MCPError(
                    INVALID_PARAMS,
                    f"refused: run job {busy[0].job_id} is still spending on this metered "
                    "machine; wait for it or cancel it",
                )
            lock_fd = self._metered_lock() if plan.metered else None
            fds = () if lock_fd is None else (lock_fd,)
            try:
                job = self.jobs.start(
                    "run_claims",
                    {**spec, "metered_lock_fd": lock_fd},
                    agent=_agent_name(),
                    scope=RUN,
                    pass_fds=fds,
                )
            finally:
                if lock_fd is not None:
                    os.close(lock_fd)  # the worker's inherited copy keeps the lock
        return _job_out(job)

    def _metered_lock(self) -> int:
        """The store's metered-run lock (ledger/metered_lock.py), or the refusal as a tool
        error when another metered run, in any process, holds it."""
        try:
            return metered_lock.hold(self.config.store)
        except metered_lock.MeteredRunBusy as err:
            raise MCPError(INVALID_PARAMS, f"refused: {err}") from None
        except OSError as err:
            raise MCPError(INTERNAL_ERROR, f"metered-run lock: {err}") from None

    def score(self) -> outputs.Written:
        """Score every claim from the stored runs and write results/scores.parquet."""
        root, store = self.config.root, self.config.store
        scored, path = service.score_and_write(root, store, self._claims(), self._runs())
        return outputs.Written(
            path=_relative(root, path), summary=f"{scored.num_runs} run(s): {scored.summary()}"
        )

    def build_site(self) -> outputs.Written:
        """Render the scoreboard (site/index.html and a page per claim) from the stored runs."""
        root = self.config.root
        with _invalid_params():
            built = service.build_site(
                root, self.config.store, self._claims(), self._runs(), root / "site"
            )
        return outputs.Written(
            path=_relative(root, built.index),
            summary=f"{built.num_claims} claim pages from {built.num_runs} run(s)",
        )

    def warm_cache(
        self,
        max_num_seqs: Annotated[int, Field(ge=1, le=1024)] = 32,
        max_num_batched_tokens: Annotated[int, Field(ge=1, le=65536)] = 512,
        max_model_len: Annotated[int, Field(ge=16, le=131072)] = 1024,
    ) -> outputs.JobOut:
        """Start precompiling every bucket of an engine of these sizes (`claimbench serve`'s
        defaults) into the persistent compilation cache experiments load their steps from; a
        job: job_status reports buckets compiled, compile seconds and cache entries."""
        spec = {
            "dtype": self.config.dtype,
            "model": str(self.config.model) if self.config.model else None,
            "engine": {
                "max_num_seqs": max_num_seqs,
                "max_num_batched_tokens": max_num_batched_tokens,
                "max_model_len": max_model_len,
            },
        }
        return _job_out(self.jobs.start("warm_cache", spec, agent=_agent_name(), scope=RUN))

    def job_cancel(self, job_id: JobId) -> outputs.JobOut:
        """Stop a job of this agent as Ctrl-C stops `claimbench run`: the run in flight is not
        stored, runs already stored are kept. Returns once the worker has stopped."""
        job = self._own_job(job_id)
        self.jobs.cancel(job)
        return _job_out(job)

    def tools(self) -> dict[str, Any]:
        """Tool name -> bound method, for the server to register (ops/scopes.TOOL_SCOPES' keys)."""
        return {name: getattr(self, name) for name in TOOL_SCOPES}
