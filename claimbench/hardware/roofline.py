"""The Scaling Book's decode / prefill cost model (ch. 7-8) on the chip spec table.

One decode step of ``batch`` sequences, each with ``context`` cached tokens, on N chips:

    step = batch * KV_bytes_per_seq / BW  +  max(2 * batch * params / FLOPs, weight_bytes / BW)

KV loading is attention: it cannot overlap the weight matmuls' memory traffic, so it adds.
The weight matmuls are bounded by the larger of their FLOPs and their weight loading.

Tensor parallelism over N chips: weights and KV split N ways, BW and FLOPs multiplied by N.
Splitting KV N ways assumes it is sharded by KV head while N <= num_kv_heads and by sequence
(attention data parallelism) beyond that, never replicated. Optional ICI term: each layer
all-reduces its activations twice (after attention and after the MLP), bf16, as a ring; see
``all_reduce_s``. It is added, not overlapped (the pessimistic end); the book's 17 ms leaves it
out, so it is off by default.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from claimbench.hardware.chips import ChipSpec
from claimbench.hardware.model_presets import ModelShape

BYTES_PER_ELEMENT = {"bf16": 2, "int8": 1, "fp8": 1}
ACTIVATION_BYTES = 2  # activations stay bf16 whatever the weights' storage dtype
ALL_REDUCES_PER_LAYER = 2  # Megatron-style TP: after attention's o_proj and the MLP's down_proj
DEFAULT_HBM_RESERVE = 0.1  # HBM kept back for activations, compiler scratch and fragmentation


def _check_dtype(kind: str, dtype: str) -> None:
    if dtype not in BYTES_PER_ELEMENT:
        raise ValueError(f"{kind} dtype {dtype!r} is not one of {', '.join(BYTES_PER_ELEMENT)}")


def kv_bytes_per_token(model: ModelShape, kv_dtype: str) -> int:
    """Bytes of K and V one token adds to the cache, over all layers.

    Per-token quantization scales (4 bytes per K/V head row for int8 in the engine) are left
    out, as the Scaling Book leaves them out: 4 / head_dim, 3% at head_dim 128.
    """
    _check_dtype("kv", kv_dtype)
    return model.kv_elements_per_token * BYTES_PER_ELEMENT[kv_dtype]


def weight_bytes(model: ModelShape, weight_dtype: str) -> int:
    """Bytes of every weight stored in ``weight_dtype`` (embeddings included, as the book does)."""
    _check_dtype("weight", weight_dtype)
    return model.num_params * BYTES_PER_ELEMENT[weight_dtype]


def expert_fraction_touched(model: ModelShape, num_tokens: float) -> float:
    """Expected fraction of experts some token in a batch routes to (1.0 for dense models).

    Assumes uniform, independent routing: an expert is missed by one token with probability
    1 - k/E, so by all of them with (1 - k/E) ** num_tokens.
    """
    miss = 1.0 - model.experts_per_token / model.num_experts
    return 1.0 - miss**num_tokens


def weight_bytes_loaded(model: ModelShape, weight_dtype: str, num_tokens: float) -> float:
    """Weight bytes one forward over ``num_tokens`` tokens reads: MoE skips untouched experts."""
    per_element = BYTES_PER_ELEMENT[weight_dtype]
    dense = (model.num_params - model.expert_params) * per_element
    experts = model.expert_params * per_element
    return dense + experts * expert_fraction_touched(model, num_tokens)


def all_reduce_s(num_bytes: float, num_chips: int, ici_bytes_per_s: float) -> float:
    """Time of one ring all-reduce of ``num_bytes`` over ``num_chips`` chips.

    A ring all-reduce (reduce-scatter + all-gather) sends 2 (N-1)/N of the buffer out of every
    chip. A chip's egress is half its bidirectional ICI bandwidth, taken as fully usable: that
    is optimistic on a torus, where one ring runs over 2 of a chip's 4-6 links. Per-hop latency
    is ignored, which matters only for buffers of a few KiB.
    """
    if num_chips == 1:
        return 0.0
    return 2 * (num_chips - 1) / num_chips * num_bytes / (ici_bytes_per_s / 2)


@dataclass(frozen=True)
class ServingSetup:
    """One model served on N chips of one kind, at one batch and context length."""

    model: ModelShape
    chip: ChipSpec
    num_chips: int = 1
    batch: int = 1  # sequences decoded together
    context: int = 4096  # cached tokens per sequence (the book's "context length")
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    compute_dtype: str = "bf16"  # matmul operand dtype: int8 weights with bf16 math by default
    include_ici: bool = False
    hbm_reserve_fraction: float = DEFAULT_HBM_RESERVE

    def __post_init__(self) -> None:
        for field in ("num_chips", "batch", "context"):
            if getattr(self, field) <= 0:
                raise ValueError(f"{field} must be > 0, got {getattr(self, field)}")
        _check_dtype("weight", self.weight_dtype)
        _check_dtype("kv", self.kv_dtype)
        self.chip.peak_flops_per_s(self.compute_dtype)  # raises for a peak the chip lacks
        if not 0.0 <= self.hbm_reserve_fraction < 1.0:
            raise ValueError(
                f"hbm_reserve_fraction must be in [0, 1), got {self.hbm_reserve_fraction}"
            )

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.chip.hbm_bytes_per_s * self.num_chips

    @property
    def flops_per_s(self) -> float:
        return self.chip.peak_flops_per_s(self.compute_dtype) * self.num_chips


@dataclass(frozen=True)
class DecodeStep:
    """The terms of one decode step, in seconds, and the bytes it reads from HBM."""

    kv_load_s: float
    weight_load_s: float
    compute_s: float
    ici_s: float
    bytes_moved: float  # over all chips

    @property
    def step_s(self) -> float:
        return self.kv_load_s + max(self.compute_s, self.weight_load_s) + self.ici_s


def _ici_s(setup: ServingSetup, num_tokens: int) -> float:
    """The tensor-parallel all-reduces of one forward over ``num_tokens`` tokens (0 when off)."""
    if not setup.include_ici:
        return 0.0
    activations = num_tokens * setup.model.hidden_size * ACTIVATION_BYTES
    per_reduce = all_reduce_s(activations, setup.num_chips, setup.chip.ici_bytes_per_s)
    return setup.model.num_layers * ALL_REDUCES_PER_LAYER * per_reduce


def decode_step(setup: ServingSetup, batch: int | None = None) -> DecodeStep:
    """One decode step of ``batch`` sequences (default ``setup.batch``) at ``setup.context``."""
    batch = setup.batch if batch is None else batch
    model = setup.model
    kv_bytes = batch * setup.context * kv_bytes_per_token(model, setup.kv_dtype)
    loaded = weight_bytes_loaded(model, setup.weight_dtype, batch)
    return DecodeStep(
        kv_load_s=kv_bytes / setup.hbm_bytes_per_s,
        weight_load_s=loaded / setup.hbm_bytes_per_s,
        compute_s=2 * batch * model.num_active_params / setup.flops_per_s,
        ici_s=_ici_s(setup, batch),
        bytes_moved=kv_bytes + loaded,
    )


def critical_batch(setup: ServingSetup) -> float:
    """The batch at which matmul time equals weight-loading time (independent of N and context).

    Dense: weight_bytes * FLOPs / (2 * params * BW). For MoE the loaded weights grow with the
    batch; compute - loading is convex in the batch and negative at 0, so it crosses zero once,
    found by bisection below the all-experts-loaded answer (an upper bound).
    """
    model = setup.model
    per_batch_flops_s = 2 * model.num_active_params / setup.flops_per_s

    def gap(batch: float) -> float:
        loaded = weight_bytes_loaded(model, setup.weight_dtype, batch)
        return batch * per_batch_flops_s - loaded / setup.hbm_bytes_per_s

    high = weight_bytes(model, setup.weight_dtype) / setup.hbm_bytes_per_s / per_batch_flops_s
    if model.num_experts == 1:
        return high
    low = 0.0
    for _ in range(100):  # 2**-100 of the bracket: far below any meaningful batch resolution
        mid = (low + high) / 2
        low, high = (mid, high) if gap(mid) < 0 else (low, mid)
    return high


def max_batch(setup: ServingSetup) -> int:
    """Most sequences of ``context`` tokens whose KV fits in HBM beside the weights.

    Usable HBM is N * hbm_bytes * (1 - hbm_reserve_fraction); 0 when the weights alone do not fit.
    """
    usable = setup.num_chips * setup.chip.hbm_bytes * (1.0 - setup.hbm_reserve_fraction)
    free = usable - weight_bytes(setup.model, setup.weight_dtype)
    per_seq = setup.context * kv_bytes_per_token(setup.model, setup.kv_dtype)
    return max(0, math.floor(free / per_seq))


def prefill_s(setup: ServingSetup) -> float:
    """Time to prefill one sequence of ``context`` tokens.

    FLOPs: 2 * active params per token, plus causal attention's 2 * layers * q_heads * head_dim
    * context**2 (QK^T and PV, each half-masked). Bytes: the weights once and the KV written.
    Prefill overlaps the two, so the time is the larger; the ICI term as in decode.
    """
    model, tokens = setup.model, setup.context
    attention_flops = 2 * model.num_layers * model.num_heads * model.head_dim * tokens**2
    flops = 2 * model.num_active_params * tokens + attention_flops
    num_bytes = weight_bytes_loaded(model, setup.weight_dtype, tokens) + tokens * (
        kv_bytes_per_token(model, setup.kv_dtype)
    )
    compute_s = flops / setup.flops_per_s
    return max(compute_s, num_bytes / setup.hbm_bytes_per_s) + _ici_s(setup, tokens)


@dataclass(frozen=True)
class RooflineEstimate:
    """Everything ``estimate`` derives for one ServingSetup (seconds, bytes, tokens/s, USD)."""

    step_s: float
    kv_load_s: float
    weight_load_s: float
    compute_s: float
    ici_s: float
    tokens_per_s: float
    tokens_per_s_per_chip: float
    bytes_per_step: float
    kv_bytes_per_token: int
    kv_bytes: int  # the whole batch's cache at this context
    weight_bytes: int
    critical_batch: float
    bound: str  # "memory" | "compute": whether weight loading or matmuls set the step
    max_batch: int
    fits: bool  # weights + this batch's KV fit in usable HBM
    mfu: float  # achieved matmul FLOP/s over peak, at this batch
    mfu_at_max_batch: float | None  # None when not even one sequence fits
    prefill_s: float
    usd_per_million_tokens: float | None  # decode at this batch; None for unpriced chips

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _mfu(setup: ServingSetup, batch: int, step_s: float) -> float:
    return 2 * batch * setup.model.num_active_params / step_s / setup.flops_per_s


def estimate(setup: ServingSetup) -> RooflineEstimate:
    """The decode step, throughput, capacity and prefill numbers for ``setup``."""
    step = decode_step(setup)
    tokens_per_s = setup.batch / step.step_s
    kv_per_token = kv_bytes_per_token(setup.model, setup.kv_dtype)
    kv_bytes = setup.batch * setup.context * kv_per_token
    weights = weight_bytes(setup.model, setup.weight_dtype)
    fit_batch = max_batch(setup)
    mfu_at_max = None
    if fit_batch > 0:
        mfu_at_max = _mfu(setup, fit_batch, decode_step(setup, fit_batch).step_s)
    price = setup.chip.price_per_chip_hour
    usd_per_million = None
    if price is not None:
        usd_per_million = price * setup.num_chips / 3600 / tokens_per_s * 1e6
    return RooflineEstimate(
        step_s=step.step_s,
        kv_load_s=step.kv_load_s,
        weight_load_s=step.weight_load_s,
        compute_s=step.compute_s,
        ici_s=step.ici_s,
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_chip=tokens_per_s / setup.num_chips,
        bytes_per_step=step.bytes_moved,
        kv_bytes_per_token=kv_per_token,
        kv_bytes=kv_bytes,
        weight_bytes=weights,
        critical_batch=critical_batch(setup),
        bound="compute" if step.compute_s > step.weight_load_s else "memory",
        max_batch=fit_batch,
        fits=setup.batch <= fit_batch,
        mfu=_mfu(setup, setup.batch, step.step_s),
        mfu_at_max_batch=mfu_at_max,
        prefill_s=prefill_s(setup),
        usd_per_million_tokens=usd_per_million,
    )
