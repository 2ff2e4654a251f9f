"""What `tpu-check` compiles: the profile's model and engine, the chosen format, tp and buckets."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from claimbench.engine.config import EngineConfig
from claimbench.engine.worker.sharding import check_tp
from claimbench.harness.project_config import load_project_config
from claimbench.models.config import ModelConfig
from claimbench.tpucompile import check as tpu_check


@dataclass(frozen=True)
class CheckSetup:
    """One engine's TPU compile: model, engine config and buckets (None: every bucket)."""

    model_name: str
    model_cfg: ModelConfig
    engine_cfg: EngineConfig
    buckets: list[tuple[int, int]] | None


def check_setup(
    root: Path,
    profile: str,
    *,
    model: str | None = None,
    tp: int = 1,
    buckets: str | None = None,
    weights: str = "bf16",
    kv_dtype: str = "auto",
) -> CheckSetup:
    """The setup `tpu-check` compiles at ``profile`` (the full profile's model is the one
    claims.yaml pins, as shapes only); ``model`` overrides it, ``buckets`` reads as
    ``16x8,512x32``. Raises ValueError naming the bad value (tp that cannot split the model)."""
    model_name, engine_cfg = tpu_check.profile_setup(profile)
    if profile == "full":
        pinned = load_project_config(root).full_profile
        if pinned is not None and pinned.model.preset is not None:
            model_name = pinned.model.preset
    engine_cfg = dataclasses.replace(engine_cfg, weights=weights, kv_dtype=kv_dtype, tp=tp)
    pairs = tpu_check.parse_buckets(buckets) if buckets else None
    model_name, model_cfg = tpu_check.resolve_model(model or model_name)
    check_tp(tp, model_cfg.num_heads, model_cfg.num_kv_heads, tpu_check.SLICE_CHIPS)
    return CheckSetup(model_name, model_cfg, engine_cfg, pairs)
