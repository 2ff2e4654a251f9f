"""Every claim's engines compiled for a TPU chip at a profile, weights as shapes.

Per engine a claim's experiment builds (claim_engines.py): its EngineConfig is validated (a
setting the engine refuses is the finding, in one line), then the engine step is compiled
for the chip at the config's largest bucket, the one that needs the most memory, over the
config's tp chips. The answer per engine is OK, the compiler's one-line error, or "does not
fit" with the sizes, as tpu_check reports them. An engine whose pool is sized from the
chip's HBM (``hbm_utilization``) gets the pool tpucompile/pool_fit.py chooses for this chip,
reported with the sizes it was chosen from; a speculative engine's draft model has its own
step compiled beside the target's (tpucompile/draft.py). Engines an experiment holds at once (one
``group``) are then summed: their arguments (weights, pools, inputs) are all resident, and
the largest one step's temporaries on top.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from claimbench.engine.config import EngineConfig
from claimbench.engine.spec.draft_model import check_draft
from claimbench.engine.worker.buckets import bucket_pairs
from claimbench.engine.worker.sharding import check_tp
from claimbench.harness.claims import Claim
from claimbench.models.checkpoint import default_draft_path, read_config
from claimbench.models.config import ModelConfig
from claimbench.tpucheck.claim_engines import ClaimEngine, claim_engines, claim_params
from claimbench.tpucompile.check import SLICE_CHIPS, BucketReport, check, resolve_model
from claimbench.tpucompile.pool_fit import HBM_UTILIZATION, PoolFit, size_pool

# Experiments whose float32 reference is computed layer by layer (lab/quality/f32_reference.py).
F32_REFERENCE = {"bf16_not_fp16"}


@dataclass(frozen=True)
class ClaimCheck:
    """One engine of one claim, checked."""

    claim_id: str
    setting: str
    model: str
    tp: int
    bucket: BucketReport | None  # None when the config was refused before compiling
    config_error: str | None = None
    group: int = 0  # the claim's engines in one group are resident at once
    pool: PoolFit | None = None  # the pool chosen from the chip's HBM (hbm_utilization)
    draft: BucketReport | None = None  # a speculative engine's draft model step

    @property
    def error(self) -> str | None:
        errors = [self.config_error] + [b.error for b in (self.bucket, self.draft) if b]
        errors.append(self.draft_fit_error)
        return "; ".join(e for e in errors if e) or None

    @property
    def draft_fit_error(self) -> str | None:
        """A speculative engine whose step and draft step each fit, but not both resident
        with the larger step's temporaries; None otherwise."""
        if self.bucket is None or self.draft is None or self.bucket.error or self.draft.error:
            return None
        needed, hbm = self.resident_bytes + self.temp_bytes, self.bucket.hbm_bytes
        if needed <= hbm:
            return None
        return (
            f"does not fit HBM with its draft: {needed / 1e9:.2f} GB (target and draft "
            f"resident {self.resident_bytes / 1e9:.2f} GB, temporaries "
            f"{self.temp_bytes / 1e9:.2f} GB) > {hbm / 1e9:.1f} GB"
        )

    @property
    def resident_bytes(self) -> int:
        """Arguments (weights, pools, inputs) of its step and its draft's: what stays on the
        chip between steps. 0 when nothing compiled."""
        return sum(b.total_bytes - b.temp_bytes for b in (self.bucket, self.draft) if b)

    @property
    def temp_bytes(self) -> int:
        """The largest one step of it needs on top of everything resident."""
        return max((b.temp_bytes for b in (self.bucket, self.draft) if b), default=0)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "error": self.error, "ok": self.ok}


@dataclass(frozen=True)
class ResidentGroup:
    """Engines of one claim held at once, summed. Bytes are one chip's."""

    claim_id: str
    settings: list[str]
    resident_bytes: int  # every engine's weights, pools and inputs
    temp_bytes: int  # the largest step's temporaries
    hbm_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.resident_bytes + self.temp_bytes

    @property
    def ok(self) -> bool:
        return self.total_bytes <= self.hbm_bytes

    @property
    def error(self) -> str | None:
        if self.ok:
            return None
        return (
            f"does not fit HBM: {len(self.settings)} engines held at once need "
            f"{self.total_bytes / 1e9:.2f} GB ({self.resident_bytes / 1e9:.2f} GB resident, "
            f"{self.temp_bytes / 1e9:.2f} GB temporaries) > {self.hbm_bytes / 1e9:.1f} GB"
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "total_bytes": self.total_bytes, "error": self.error, "ok": self.ok}


def resident_groups(checks: list[ClaimCheck], hbm_bytes: int) -> list[ResidentGroup]:
    """Per claim, each group of more than one engine held at once whose engines all
    compiled (a failed one is reported on its own): their sum against ``hbm_bytes``."""
    groups: dict[tuple[str, int], list[ClaimCheck]] = {}
    for c in checks:
        groups.setdefault((c.claim_id, c.group), []).append(c)
    return [
        ResidentGroup(
            claim_id,
            [c.setting for c in members],
            sum(c.resident_bytes for c in members),
            max(c.temp_bytes for c in members),
            hbm_bytes,
        )
        for (claim_id, _), members in groups.items()
        if len(members) > 1 and all(c.resident_bytes for c in members)
    ]


def check_claims(
    root: Path,
    claims: list[Claim],
    profile: str,
    chip: str,
    *,
    model_name: str,
    model_cfg: ModelConfig,
) -> list[ClaimCheck]:
    """Each claim's engines at ``profile`` compiled for ``chip``; the run's model is
    ``model_cfg`` unless an experiment serves its own."""
    results = []
    for claim in claims:
        try:
            engines = claim_engines(root, claim, profile, model_cfg)
        except ValueError as err:
            results.append(ClaimCheck(claim.id, "", model_name, 1, None, str(err)))
            continue
        for engine in engines:
            results.append(_check_engine(engine, chip, model_name, model_cfg))
        if claim.module_name in F32_REFERENCE:
            # Its float32 side: no engine, a layer-by-layer pass, alone on the chip.
            from claimbench.tpucheck.reference import check_reference

            params = claim_params(root, claim, profile)
            bucket = check_reference(chip, model_cfg, params["num_windows"], params["window_len"])
            group = max((e.group for e in engines), default=0) + 1
            results.append(
                ClaimCheck(claim.id, "f32 reference", model_name, 1, bucket, group=group)
            )
    return results


def _check_engine(
    engine: ClaimEngine, chip: str, model_name: str, model_cfg: ModelConfig
) -> ClaimCheck:
    tp = int(engine.options.get("tp", 1))
    options = dict(engine.options)
    utilization = options.pop(HBM_UTILIZATION, None)
    refused = functools.partial(ClaimCheck, engine.claim_id, engine.setting, tp=tp, bucket=None)
    try:
        if engine.model is not None:
            model_name, model_cfg = resolve_model(engine.model)
        config = EngineConfig.from_flat(**options)
        check_tp(tp, model_cfg.num_heads, model_cfg.num_kv_heads, SLICE_CHIPS)
        if config.scheduler.max_model_len > model_cfg.max_position_embeddings:
            raise ValueError(
                f"max_model_len={config.scheduler.max_model_len} exceeds the model's "
                f"max_position_embeddings={model_cfg.max_position_embeddings}"
            )
        draft_cfg = None
        if config.spec.speculative == "draft":
            if engine.draft is not None:
                _, draft_cfg = resolve_model(engine.draft)
            else:
                draft_cfg = read_config(config.spec.draft_model_path or default_draft_path())
            check_draft(draft_cfg, model_cfg, None, None)
        pool = None
        if utilization is not None:
            pool = size_pool(chip, model_cfg, config, utilization)
            if not pool.fits:
                return refused(model=model_name, config_error=pool.describe(), pool=pool)
            config = dataclasses.replace(config, kv_pool_bytes=pool.pool_bytes)
    except (TypeError, ValueError) as err:
        return refused(model=model_name, config_error=str(err))
    largest = bucket_pairs(config)[-1]
    report = check(chip, model_cfg, config, model_name=model_name, buckets=[largest])
    (bucket,) = report.buckets
    draft = None
    if draft_cfg is not None:
        from claimbench.tpucompile.draft import check_draft_step

        draft = check_draft_step(chip, draft_cfg, config)
    return ClaimCheck(
        engine.claim_id,
        engine.setting,
        model_name,
        tp,
        bucket,
        group=engine.group,
        pool=pool,
        draft=draft,
    )
