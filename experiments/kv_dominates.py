"""kv-dominates: for Llama-3.1-8B at 32 sequences of 4k tokens in bf16, KV outweighs the weights.

Sizes come from the model preset's dims through the roofline model's byte counts, so the
numbers are exact arithmetic (evidence "analytic"), not a measurement on this machine. They do
not vary between trials; every trial records the same values so the scorer gets its trials.

Params (claims.yaml, per profile): model (a roofline preset), batch (sequences), context
(tokens per sequence), dtype (bf16 | int8 | fp8, for both weights and KV).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from claimbench.harness.model_presets import ModelShape, get_preset
from claimbench.harness.roofline import kv_bytes_per_token, weight_bytes

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS = {"model": "llama-3.1-8b", "batch": 32, "context": 4096, "dtype": "bf16"}


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


def run(ctx: RunContext) -> None:
    """Record kv_over_weights (and kv_bytes, weight_bytes, kv_bytes_per_token) per trial."""
    params = _params(ctx)
    sizes = analytic_sizes(
        get_preset(params["model"]),
        batch=params["batch"],
        context=params["context"],
        dtype=params["dtype"],
    )
    for trial in range(ctx.trials):
        record_sizes(ctx, sizes, trial=trial, evidence="analytic", model=params["model"])
