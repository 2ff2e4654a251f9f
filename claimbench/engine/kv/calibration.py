"""Per-tensor fp8 KV-cache scales calibrated on one batch of held-out text.

fp8 e4m3 spans +-448 with 3 mantissa bits, so a scale maps the largest K (or V) the model
writes onto 448: scale = absmax / FP8_MAX, one for K and one for V, taken over every layer,
KV head, position and window of the batch. K is measured after RoPE, as the cache stores it.
The batch runs through the model's dense path, in the model's own dtype and with whatever
weight quantization it carries, because those are the values the serving path writes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from claimbench.kernels.kv_quant import FP8_MAX
from claimbench.models.llama import LlamaForCausalLM
from claimbench.models.tokenizer import Tokenizer
from claimbench.workload.corpus import heldout_token_windows

CALIBRATION_WINDOWS = 8  # the one batch: windows of held-out text
CALIBRATION_LENGTH = 256  # tokens per window
CALIBRATION_SEED = 1234  # fixed: the scale is a property of the model, not of a trial


@nnx.jit
def _kv_absmax(model: LlamaForCausalLM, token_ids: jax.Array) -> jax.Array:
    positions = jnp.broadcast_to(jnp.arange(token_ids.shape[1]), token_ids.shape)
    x = model.embed_tokens(token_ids)
    k_max = v_max = jnp.zeros((), jnp.float32)
    for layer in model.layers:
        # The same projections and RoPE the layer applies; the layer then runs as usual.
        _, k, v = layer.self_attn._qkv(layer.input_layernorm(x), positions)
        k_max = jnp.maximum(k_max, jnp.max(jnp.abs(k.astype(jnp.float32))))
        v_max = jnp.maximum(v_max, jnp.max(jnp.abs(v.astype(jnp.float32))))
        x = layer.dense(x, positions, None)
    return jnp.stack([k_max, v_max])


def kv_absmax(model: LlamaForCausalLM, token_ids: np.ndarray) -> tuple[float, float]:
    """token_ids i32[B, S] (no padding) -> (max |K|, max |V|) over all layers and heads."""
    if token_ids.ndim != 2 or token_ids.size == 0:
        raise ValueError(f"need a non-empty batch i32[B, S], got shape {token_ids.shape}")
    k_max, v_max = np.asarray(_kv_absmax(model, jnp.asarray(token_ids, jnp.int32)))
    return float(k_max), float(v_max)


def fp8_kv_scales(model: LlamaForCausalLM, token_ids: np.ndarray) -> tuple[float, float]:
    """(k_scale, v_scale) = absmax / FP8_MAX over the batch i32[B, S]."""
    k_max, v_max = kv_absmax(model, token_ids)
    if not (np.isfinite(k_max) and np.isfinite(v_max)) or k_max == 0 or v_max == 0:
        raise ValueError(f"cannot calibrate fp8 KV scales from absmax K={k_max}, V={v_max}")
    return k_max / FP8_MAX, v_max / FP8_MAX


def calibration_windows(tokenizer: Tokenizer, max_len: int) -> np.ndarray:
    """The calibration batch: i32[CALIBRATION_WINDOWS, min(CALIBRATION_LENGTH, max_len)]."""
    length = min(CALIBRATION_LENGTH, max_len)
    return heldout_token_windows(tokenizer, CALIBRATION_WINDOWS, length, CALIBRATION_SEED)


def resolve_fp8_kv_scales(
    kv_scale: str | float, model: LlamaForCausalLM, tokenizer: Tokenizer | None, max_len: int
) -> tuple[float, float]:
    """(k_scale, v_scale) for an fp8 cache: the number given for both, or calibrated."""
    if kv_scale != "calibrate":
        return float(kv_scale), float(kv_scale)
    if tokenizer is None:
        raise ValueError("kv_scale='calibrate' needs the model's tokenizer to read held-out text")
    return fp8_kv_scales(model, calibration_windows(tokenizer, max_len))
