"""The model's f32 matrices packed once for the native CPU dense kernel (native_dense.py).

On a CPU with AVX-512 or AVX2, the "cpu" backend's runner serves a copy of the model whose every
``nnx.Linear`` is a ``PackedLinear`` and whose tied embedding is a ``PackedEmbedding``
(the table for lookups, and the head packed as [vocab / P, dim, P] panels beside it):
XLA's dot would repack each weight at every call of the step. The model the engine was
given is left as it was. ``dense_path`` says which matmul a runner uses;
``CLAIMBENCH_NATIVE_DENSE=native|xla`` forces either.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
from flax import nnx

from claimbench.kernels import native_dense
from claimbench.kernels.native_attention import vector_isa
from claimbench.models.llama import Embedding, LlamaForCausalLM
from claimbench.models.quantize import set_child

DENSE_ENV = "CLAIMBENCH_NATIVE_DENSE"
DENSE_PATHS = ("native", "xla")


class PackedLinear(nnx.Module):
    """An f32 ``nnx.Linear`` whose kernel [in, out] is held as the dense kernel's panels."""

    def __init__(self, packed: jax.Array, n_out: int, bias: jax.Array | None) -> None:
        self.packed = nnx.Param(packed)  # f32[ceil(out / 32), in, 32]
        self.bias = nnx.Param(bias) if bias is not None else nnx.data(None)  # f32[out] or None
        self.n_out = n_out

    @classmethod
    def from_linear(cls, linear: nnx.Linear) -> PackedLinear:
        kernel = linear.kernel[...]
        bias = linear.bias[...] if linear.bias is not None else None
        return cls(native_dense.pack(kernel), kernel.shape[1], bias)

    def __call__(self, x: jax.Array) -> jax.Array:
        y = native_dense.dense(x, self.packed[...], self.n_out)
        return y + self.bias[...] if self.bias is not None else y


class PackedEmbedding(nnx.Module):
    """The token-embedding table, and the tied head packed from its transpose."""

    def __init__(self, table: jax.Array) -> None:
        self.embedding = nnx.Param(table)  # f32[vocab, dim], for lookups
        self.head = nnx.Param(native_dense.pack(table.T))  # f32[ceil(vocab / 32), dim, 32]
        self.vocab_size = table.shape[0]

    def __call__(self, token_ids: jax.Array) -> jax.Array:
        return jnp.take(self.embedding[...], token_ids, axis=0)

    def attend(self, hidden: jax.Array) -> jax.Array:
        """Tied output head: f32[..., dim] -> logits f32[..., vocab]."""
        return native_dense.dense(hidden, self.head[...], self.vocab_size)


def dense_path(model: LlamaForCausalLM) -> str:
    """The matmul a "cpu"-backend runner uses for ``model``: ``DENSE_ENV`` if set, else
    "native" for an f32 model on a CPU with vector multiply-add (``vector_isa``: the
    kernel's tiles are sized to AVX-512 or AVX2) where the native kernels build, and "xla"
    otherwise. ValueError names a bad value."""
    forced = os.environ.get(DENSE_ENV)
    if forced and forced not in DENSE_PATHS:
        raise ValueError(f"{DENSE_ENV}={forced!r}: expected one of {DENSE_PATHS}")
    if forced == "xla" or jnp.dtype(model.dtype) != jnp.float32:
        return "xla"
    if not any(isinstance(m, nnx.Linear) for _, m in nnx.iter_modules(model)):
        return "xla"  # quantized: its matrices are not f32 Linears
    if forced == "native" or vector_isa():
        return "native" if native_dense.unavailable_reason() is None else "xla"
    return "xla"


def pack_model(model: LlamaForCausalLM) -> LlamaForCausalLM:
    """A copy of ``model`` with every f32 ``nnx.Linear`` packed, and its embedding too
    where it is the (tied) output head."""
    model = nnx.clone(model)
    for path, module in list(nnx.iter_modules(model)):
        if isinstance(module, nnx.Linear) and module.kernel[...].dtype == jnp.float32:
            set_child(model, path, PackedLinear.from_linear(module))
    table = model.embed_tokens
    tied = model.lm_head is None and isinstance(table, Embedding)
    if tied and table.embedding[...].dtype == jnp.float32:
        model.embed_tokens = PackedEmbedding(table.embedding[...])
    return model
