"""kv-dominates: for Llama-3.1-8B at 32 sequences of 4k tokens in bf16, KV outweighs the weights.

The condition is arithmetic on the model's dims (the roofline model's byte counts:
batch * context * 2 * layers * kv_heads * head_dim * bytes against params * bytes), so
kv_over_weights is recorded once as analytic evidence, with the layout, batch, context and
dtype as its inputs, and the byte counts behind it (kv_bytes, weight_bytes,
kv_bytes_per_token) beside it.

Measured side (param ``measure``): the engine serving the run's model (--model, default the
shipped claimbench-tiny) in bf16 is given a KV pool that holds exactly ``batch`` sequences of
``context`` tokens (checked on its stats), and the bytes of the arrays it really allocated are
counted: the KV cache (null page included) and the weights. These are side metrics labelled
with the served model (served_kv_bytes, served_weight_bytes, served_kv_over_weights), never
the condition: a small served model says nothing about Llama-3.1-8B's balance.

Params (claims.yaml, per profile): model (a roofline preset), batch (sequences), context
(tokens per sequence), dtype (bf16 | int8 | fp8, for both weights and KV), measure (bool),
``engine`` (options of the measured engine; its page_size sizes the pool).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from claimbench.hardware.model_presets import ModelShape, get_preset
from claimbench.hardware.roofline import kv_bytes_per_token, weight_bytes
from claimbench.lab.engines.engine_settings import EngineSettings

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext
    from claimbench.models.config import ModelConfig

DEFAULT_PARAMS: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "batch": 32,
    "context": 4096,
    "dtype": "bf16",
    "measure": False,
    "engine": {},
}


@dataclass(frozen=True)
class KVWeightSizes:
    """The KV cache of a whole batch against the weights, in bytes."""

    kv_bytes_per_token: int
    kv_bytes: int  # batch * context * kv_bytes_per_token (measured: the pool as allocated)
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


def record_analytic_sizes(ctx: RunContext, params: dict[str, Any]) -> None:
    """kv_over_weights and the byte counts behind it, once each, with the formula's inputs."""
    shape = get_preset(params["model"])
    sizes = analytic_sizes(
        shape, batch=params["batch"], context=params["context"], dtype=params["dtype"]
    )
    inputs = {
        "layout": asdict(shape),
        "num_params": shape.num_params,
        "batch": params["batch"],
        "context": params["context"],
        "dtype": params["dtype"],
    }
    model = params["model"]
    ctx.record_analytic("kv_over_weights", sizes.kv_over_weights, inputs=inputs, model=model)
    for metric in ("kv_bytes", "weight_bytes", "kv_bytes_per_token"):
        value = getattr(sizes, metric)
        ctx.record_analytic(metric, value, unit="bytes", inputs=inputs, model=model)


def engines(params: dict[str, Any], model: ModelConfig | None, dtype: str) -> EngineSettings:
    """With ``measure``, one bf16 engine whose pool holds exactly ``batch`` sequences of
    ``context`` tokens of the served ``model`` (its pool and length need the model); without,
    none (the condition is analytic)."""
    if not params["measure"]:
        return EngineSettings({})
    # Imported here: the analytic part needs neither JAX nor the engine.
    from claimbench.engine.config import DEFAULT_PAGE_SIZE
    from claimbench.engine.kv.kv_cache import pool_bytes_for

    page_size = int(params["engine"].get("page_size", DEFAULT_PAGE_SIZE))
    options: dict[str, Any] = dict(
        dtype="bfloat16", kv_dtype="bf16", weights="bf16", prefix_caching="off", page_size=page_size
    )
    if model is not None:
        pages = params["batch"] * -(-params["context"] // page_size)  # every sequence's
        options["kv_pool_bytes"] = pool_bytes_for(model, options, pages)
        options["max_model_len"] = min(params["context"], model.max_position_embeddings)
    return EngineSettings({"": options})


def measured_sizes(ctx: RunContext, params: dict[str, Any]) -> KVWeightSizes:
    """What the engine allocates for the run's model in bf16 with a pool sized for ``batch``
    sequences of ``context`` tokens (``engines``), counted on its stats."""
    from claimbench.engine.kv.kv_cache import max_concurrent_sequences
    from claimbench.models.checkpoint import read_config

    settings = engines(params, read_config(ctx.model_path), ctx.dtype).settings[""]
    engine = ctx.engine(**settings)
    batch, context, page_size = params["batch"], params["context"], settings["page_size"]
    stats = engine.stats()
    held = max_concurrent_sequences(stats.num_usable_pages, page_size, context)
    if held != batch:
        raise RuntimeError(f"a pool sized for {batch} sequences of {context} tokens holds {held}")
    return KVWeightSizes(
        kv_bytes_per_token=stats.kv_bytes_per_token,
        kv_bytes=stats.kv_cache_bytes,
        weight_bytes=stats.weight_bytes,
    )


def run(ctx: RunContext) -> None:
    """Record kv_over_weights once (analytic); with ``measure``, the served model's bytes."""
    params = ctx.merged(DEFAULT_PARAMS)
    for key in ("batch", "context"):
        if not isinstance(params[key], int):
            raise ValueError(f"param {key} must be an integer, got {params[key]!r}")
    record_analytic_sizes(ctx, params)
    if not params["measure"]:
        return
    sizes = measured_sizes(ctx, params)
    served = ctx.model_path.name
    ctx.record("served_kv_over_weights", sizes.kv_over_weights, trial=0, model=served)
    for metric in ("kv_bytes", "weight_bytes"):
        value = getattr(sizes, metric)
        ctx.record(f"served_{metric}", value, trial=0, unit="bytes", model=served)
