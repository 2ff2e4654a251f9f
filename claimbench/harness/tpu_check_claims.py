"""Every claim's engines compiled for a TPU chip at a profile, weights as shapes.

Per engine a claim's experiment builds (claim_engines.py): its EngineConfig is validated (a
setting the engine refuses is the finding, in one line), then the engine step is compiled
for the chip at the config's largest bucket, the one that needs the most memory, over the
config's tp chips. The answer per engine is OK, the compiler's one-line error, or "does not
fit" with the sizes, as tpu_check reports them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from claimbench.engine.buckets import bucket_pairs
from claimbench.engine.config import EngineConfig
from claimbench.engine.sharding import check_tp
from claimbench.harness.claim_engines import ClaimEngine, claim_engines
from claimbench.harness.claims import Claim
from claimbench.harness.tpu_check import SLICE_CHIPS, BucketReport, check, resolve_model
from claimbench.models.config import ModelConfig


@dataclass(frozen=True)
class ClaimCheck:
    """One engine of one claim, checked."""

    claim_id: str
    setting: str
    model: str
    tp: int
    bucket: BucketReport | None  # None when the config was refused before compiling
    config_error: str | None = None

    @property
    def error(self) -> str | None:
        return self.config_error or (self.bucket.error if self.bucket else None)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        bucket = None if self.bucket is None else asdict(self.bucket)
        return {**asdict(self), "bucket": bucket, "error": self.error, "ok": self.ok}


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
            engines = claim_engines(root, claim, profile)
        except ValueError as err:
            results.append(ClaimCheck(claim.id, "", model_name, 1, None, str(err)))
            continue
        for engine in engines:
            results.append(_check_engine(engine, chip, model_name, model_cfg))
    return results


def _check_engine(
    engine: ClaimEngine, chip: str, model_name: str, model_cfg: ModelConfig
) -> ClaimCheck:
    tp = int(engine.options.get("tp", 1))
    try:
        if engine.model is not None:
            model_name, model_cfg = resolve_model(engine.model)
        config = EngineConfig(**engine.options)
        check_tp(tp, model_cfg.num_heads, model_cfg.num_kv_heads, SLICE_CHIPS)
        if config.max_model_len > model_cfg.max_position_embeddings:
            raise ValueError(
                f"max_model_len={config.max_model_len} exceeds the model's "
                f"max_position_embeddings={model_cfg.max_position_embeddings}"
            )
    except (TypeError, ValueError) as err:
        return ClaimCheck(engine.claim_id, engine.setting, model_name, tp, None, str(err))
    largest = bucket_pairs(config)[-1]
    report = check(chip, model_cfg, config, model_name=model_name, buckets=[largest])
    (bucket,) = report.buckets
    return ClaimCheck(engine.claim_id, engine.setting, model_name, tp, bucket)
