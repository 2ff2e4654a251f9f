"""Weight-only quantization: int8 or fp8 (e4m3) values with one f32 scale per output channel.

Every matrix of the model is quantized: each ``nnx.Linear`` (attention and MLP projections,
an untied ``lm_head``) and the token-embedding table, which in a tied model *is* the output
head. RMSNorm weights and biases (vectors, a rounding error of the bytes) stay in the model
dtype. A weight [in, out] becomes ``qvalue`` [in, out] in int8 / float8_e4m3fn and ``scale``
f32[out] with ``w ~= qvalue * scale`` (symmetric absmax: qwix maps int8 to absmax / 127.5,
fp8 to absmax / 448); the embedding table [vocab, dim] gets one scale per vocab row, which is
the output channel of the tied head.

qwix does the quantization itself (``qwix.quantize``: calibration, rounding, clipping). Its
model-rewriting path (``qwix.quantize_model`` with a ``PtqProvider``) cannot serve this model:
for an NNX module it intercepts exactly one method, while the engine calls the paged
``__call__`` and then ``logits`` separately (and calibration and the quality reference call
``forward_dense``); after PTQ every kernel is a qwix ``WithAux`` that any un-intercepted
call cannot multiply. Nor do we use ``qwix.dot_general`` for weight-only matmuls: with f32
scales it promotes the bf16 activations and the whole matmul to f32, and with bf16 scales
each channel's scale is rounded to 8 bits. Instead the modules here compute, as gpt-fast's
int8 linear does, ``(x @ qvalue.astype(dtype)) * scale`` with an f32 accumulator: int8 and
e4m3 values are exact in bf16, so the matmul is the model dtype's own and the scale is
applied once per output element.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import qwix
from flax import nnx

from claimbench.models.llama import Embedding, LlamaForCausalLM

WEIGHT_FORMATS = ("bf16", "int8", "fp8")  # bf16: unquantized, in the model's own dtype
QTYPES = {"int8": jnp.int8, "fp8": jnp.float8_e4m3fn}


def _quantize_matrix(w: jax.Array, qtype: jnp.dtype, channel_axis: int):
    """f[a, b] -> (qvalue [a, b] in qtype, f32 scale with one entry per ``channel_axis`` index)."""
    q = qwix.quantize(w.astype(jnp.float32), qtype, channelwise_axes=(channel_axis,))
    return q.qvalue, q.scale.reshape(-1).astype(jnp.float32)


class QuantizedLinear(nnx.Module):
    """A weight-only quantized ``nnx.Linear``: y = (x @ qvalue) * scale + bias."""

    def __init__(
        self,
        qvalue: jax.Array,
        scale: jax.Array,
        bias: jax.Array | None,
        *,
        dtype: jnp.dtype,
        out_dtype: jnp.dtype,
    ) -> None:
        if qvalue.ndim != 2 or scale.shape != (qvalue.shape[1],):
            raise ValueError(
                f"need qvalue [in, out] and scale [out]; got {qvalue.shape} and {scale.shape}"
            )
        self.qvalue = nnx.Param(qvalue)  # int8 | float8_e4m3fn [in, out]
        self.scale = nnx.Param(scale)  # f32[out]
        self.bias = nnx.Param(bias) if bias is not None else nnx.data(None)  # [out] or None
        self.dtype = jnp.dtype(dtype)  # the matmul's operand dtype
        self.out_dtype = jnp.dtype(out_dtype)

    @classmethod
    def from_linear(cls, linear: nnx.Linear, qtype: jnp.dtype) -> QuantizedLinear:
        """Quantize a 2-D ``nnx.Linear`` (kernel [in, out]) per output channel."""
        kernel = linear.kernel[...]
        if kernel.ndim != 2:
            raise ValueError(f"only 2-D kernels are quantized, got shape {kernel.shape}")
        qvalue, scale = _quantize_matrix(kernel, qtype, channel_axis=1)
        dtype = linear.dtype or kernel.dtype
        bias = linear.bias[...] if linear.bias is not None else None
        out_dtype = linear.preferred_element_type or dtype
        return cls(qvalue, scale, bias, dtype=dtype, out_dtype=out_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        """x f[..., in] -> f[..., out] in ``out_dtype``."""
        y = jnp.einsum(
            "...i,io->...o",
            x.astype(self.dtype),
            self.qvalue[...].astype(self.dtype),
            preferred_element_type=jnp.float32,
        )
        y = (y * self.scale[...]).astype(self.out_dtype)
        if self.bias is not None:
            y = y + self.bias[...].astype(self.out_dtype)
        return y


class QuantizedEmbedding(nnx.Module):
    """The token-embedding table with one scale per row; ``attend`` is the tied output head."""

    def __init__(self, qvalue: jax.Array, scale: jax.Array, *, dtype: jnp.dtype) -> None:
        if qvalue.ndim != 2 or scale.shape != (qvalue.shape[0],):
            raise ValueError(
                f"need qvalue [vocab, dim] and scale [vocab]; got {qvalue.shape}, {scale.shape}"
            )
        self.qvalue = nnx.Param(qvalue)  # int8 | float8_e4m3fn [vocab, dim]
        self.scale = nnx.Param(scale)  # f32[vocab]
        self.dtype = jnp.dtype(dtype)

    @classmethod
    def from_embedding(cls, embedding: Embedding, qtype: jnp.dtype) -> QuantizedEmbedding:
        table = embedding.embedding[...]
        qvalue, scale = _quantize_matrix(table, qtype, channel_axis=0)
        return cls(qvalue, scale, dtype=table.dtype)

    def __call__(self, token_ids: jax.Array) -> jax.Array:
        """i32[...] -> f[..., dim]: the rows, dequantized to the model dtype."""
        rows = jnp.take(self.qvalue[...], token_ids, axis=0).astype(jnp.float32)
        scale = jnp.take(self.scale[...], token_ids, axis=0)
        return (rows * scale[..., None]).astype(self.dtype)

    def attend(self, hidden: jax.Array) -> jax.Array:
        """Tied output head: f[..., dim] -> logits f32[..., vocab]."""
        logits = jnp.einsum(
            "...d,vd->...v",
            hidden.astype(self.dtype),
            self.qvalue[...].astype(self.dtype),
            preferred_element_type=jnp.float32,
        )
        return logits * self.scale[...]


def set_child(root: nnx.Module, path: tuple, child: nnx.Module) -> None:
    parent = root
    for key in path[:-1]:
        parent = parent[key] if isinstance(key, int) else getattr(parent, key)
    if isinstance(path[-1], int):
        parent[path[-1]] = child
    else:
        setattr(parent, path[-1], child)


def weight_format(model: LlamaForCausalLM) -> str:
    """The model's weight format: "bf16" (unquantized), "int8" or "fp8"."""
    for _, module in nnx.iter_modules(model):
        if isinstance(module, QuantizedLinear | QuantizedEmbedding):
            dtype = module.qvalue[...].dtype
            return next(name for name, qtype in QTYPES.items() if jnp.dtype(qtype) == dtype)
    return "bf16"


def quantize_weights(model: LlamaForCausalLM, weights: str) -> LlamaForCausalLM:
    """A copy of ``model`` with its matrices quantized to ``weights`` ("int8" | "fp8").

    ``model`` itself is left as it was (the copy shares its unquantized arrays: norms,
    biases). "bf16" returns ``model``; quantizing a quantized model raises ValueError.
    """
    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"weights {weights!r} is not one of {WEIGHT_FORMATS}")
    if weights == "bf16":
        return model
    current = weight_format(model)
    if current != "bf16":
        raise ValueError(f"model is already quantized to {current}")
    if model.cfg.is_moe:
        # The experts are stacked matrices, not nnx.Linear: only the router and attention would
        # be quantized, and the byte counts would mislead.
        raise ValueError(f"{weights} weights are not implemented for mixture-of-experts models")
    qtype = jnp.dtype(QTYPES[weights])
    model = nnx.clone(model)
    for path, module in list(nnx.iter_modules(model)):
        if isinstance(module, nnx.Linear):
            set_child(model, path, QuantizedLinear.from_linear(module, qtype))
        elif isinstance(module, Embedding):
            set_child(model, path, QuantizedEmbedding.from_embedding(module, qtype))
    return model


def with_weight_format(model: LlamaForCausalLM, weights: str) -> LlamaForCausalLM:
    """``model`` if it already holds ``weights``, else a quantized copy of an unquantized one.

    A model quantized to another format raises ValueError naming both.
    """
    current = weight_format(model)
    if current == weights:
        return model
    if current != "bf16":
        raise ValueError(f"model holds {current} weights; cannot serve them as {weights}")
    return quantize_weights(model, weights)
