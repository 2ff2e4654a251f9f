"""kv-dominates: for Llama-3.1-8B at 32 sequences of 4k tokens in bf16, KV outweighs the weights.

Sizes come from the model preset's dims through the roofline model's byte counts, so the
numbers are exact arithmetic (evidence "analytic"), not a measurement on this machine. They do
not vary between trials; every trial records the same values so the scorer gets its trials.

Measured part (param ``measure``): the engine serving the run's model (--model, default the
shipped claimbench-tiny) in bf16 is given a KV pool that holds exactly ``batch`` sequences of
``context`` tokens (checked by filling it through its block manager), and the bytes of the
arrays it really allocated are counted: the KV cache (null page included) and the weights.
Only a served model with the claim model's exact shape is evidence for the claim, recorded as
kv_over_weights (evidence = this platform); any other model's numbers are supporting metrics
(served_kv_over_weights, served_kv_bytes, served_weight_bytes) labelled with its name.

Params (claims.yaml, per profile): model (a roofline preset), batch (sequences), context
(tokens per sequence), dtype (bf16 | int8 | fp8, for both weights and KV), measure (bool).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from claimbench.harness.model_presets import ModelShape, get_preset, shape_from_config
from claimbench.harness.roofline import kv_bytes_per_token, weight_bytes

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS = {
    "model": "llama-3.1-8b",
    "batch": 32,
    "context": 4096,
    "dtype": "bf16",
    "measure": False,
}


@dataclass(frozen=True)
class KVWeightSizes:
    """The KV cache of a whole batch against the weights, in bytes."""

    kv_bytes_per_token: int
    kv_bytes: int  # batch * context * kv_bytes_per_token
    weight_bytes: int

    @property
    def kv_over_weights(self) -> float:
        return self.kv_bytes / self.weight_bytes


def analytic_sizes(model: ModelShape, *, batch: int, context: int, dtype: str) -> KVWeightSizes:
    """KV and weight bytes of ``model`` serving ``batch`` sequences of ``context`` tokens."""
    if batch <= 0 or context <= 0:
        raise ValueError(f"batch and context must be > 0, got batch={batch} context={context}")
    per_token = kv_bytes_per_token(model, dtype)
    return KVWeightSizes(
        kv_bytes_per_token=per_token,
        kv_bytes=batch * context * per_token,
        weight_bytes=weight_bytes(model, dtype),
    )


def record_sizes(
    ctx: RunContext, sizes: KVWeightSizes, *, trial: int, evidence: str, **labels: Any
) -> None:
    """Record the claim's metric and the byte counts behind it for one trial."""
    ctx.record("kv_over_weights", sizes.kv_over_weights, trial=trial, evidence=evidence, **labels)
    for metric in ("kv_bytes", "weight_bytes", "kv_bytes_per_token"):
        value = getattr(sizes, metric)
        ctx.record(metric, value, trial=trial, unit="bytes", evidence=evidence, **labels)


def _params(ctx: RunContext) -> dict[str, Any]:
    """DEFAULT_PARAMS overridden by the profile's; batch and context must be integers."""
    given = {key: value for key, value in ctx.params.items() if key in DEFAULT_PARAMS}
    params = DEFAULT_PARAMS | given
    for key in ("batch", "context"):
        if not isinstance(params[key], int):
            raise ValueError(f"param {key} must be an integer, got {params[key]!r}")
    return params


def measured_sizes(
    ctx: RunContext, *, batch: int, context: int
) -> tuple[KVWeightSizes, ModelShape]:
    """What the engine allocates for the run's model in bf16 with ``batch`` sequences of
    ``context`` tokens: (sizes from its arrays' bytes, the served model's shape)."""
    # Imported here: the analytic part needs neither JAX nor the engine.
    import jax
    import jax.numpy as jnp

    from claimbench.engine.kv_cache import kv_bytes_per_token as engine_kv_bytes_per_token
    from claimbench.harness.capacity import fill_capacity
    from claimbench.models.checkpoint import read_config

    cfg = read_config(ctx.model_path)
    page_size = int(ctx.params.get("engine", {}).get("page_size", 16))
    per_token = engine_kv_bytes_per_token(cfg, jnp.bfloat16)
    num_pages = 1 + batch * -(-context // page_size)  # the null page, then every sequence's
    engine = ctx.engine(
        dtype="bfloat16",
        kv_dtype="bf16",
        weights="bf16",
        prefix_caching="off",
        page_size=page_size,
        kv_pool_bytes=num_pages * page_size * per_token,
        max_model_len=min(context, cfg.max_position_embeddings),
    )
    held = fill_capacity(engine, context)
    if held != batch:
        raise RuntimeError(f"a pool sized for {batch} sequences of {context} tokens held {held}")
    kv_bytes = sum(int(x.nbytes) for x in jax.tree.leaves(engine.runner.kv_caches))
    sizes = KVWeightSizes(
        kv_bytes_per_token=per_token, kv_bytes=kv_bytes, weight_bytes=engine.runner.weight_bytes
    )
    return sizes, shape_from_config(ctx.model_path.name, cfg)


def record_measured(
    ctx: RunContext,
    sizes: KVWeightSizes,
    served: ModelShape,
    claim_model: ModelShape,
    *,
    trial: int,
) -> None:
    """The claim's metric when the served model is the claim's model, else supporting ones."""
    if dataclasses.replace(served, name=claim_model.name) == claim_model:
        record_sizes(ctx, sizes, trial=trial, evidence=ctx.evidence, model=claim_model.name)
        return
    ctx.record("served_kv_over_weights", sizes.kv_over_weights, trial=trial, model=served.name)
    for metric in ("kv_bytes", "weight_bytes"):
        value = getattr(sizes, metric)
        ctx.record(f"served_{metric}", value, trial=trial, unit="bytes", model=served.name)


def run(ctx: RunContext) -> None:
    """Record kv_over_weights (and kv_bytes, weight_bytes, kv_bytes_per_token) per trial."""
    params = _params(ctx)
    sizes = analytic_sizes(
        get_preset(params["model"]),
        batch=params["batch"],
        context=params["context"],
        dtype=params["dtype"],
    )
    measured = None
    if params["measure"]:
        measured = measured_sizes(ctx, batch=params["batch"], context=params["context"])
    for trial in range(ctx.trials):
        record_sizes(ctx, sizes, trial=trial, evidence="analytic", model=params["model"])
        if measured is not None:
            record_measured(ctx, *measured, get_preset(params["model"]), trial=trial)
