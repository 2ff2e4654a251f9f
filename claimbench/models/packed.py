"""The model's matrices packed once for the native CPU dense kernel (native_dense.py).

On a CPU with AVX-512 or AVX2, the "cpu" backend's runner serves a copy of an f32 model whose
every ``nnx.Linear`` is a ``PackedLinear`` and whose tied embedding is a ``PackedEmbedding``
(the table for lookups, and the head packed as [vocab / P, dim, P] panels beside it):
XLA's dot would repack each weight at every call of the step. The model the engine was
given is left as it was. ``dense_path`` says which matmul a runner uses;
``CLAIMBENCH_NATIVE_DENSE=native|xla`` forces either.

Batch-invariant mode (``batch_invariant=True``) takes the native kernel for a model of any
float dtype: its weights are packed as f32 panels (exact for bf16 and f16), activations are
upcast to f32 and each product is rounded back to what the model's own dot returns. XLA's
dot blocks its reduction by the (bucket-padded) row count, so a bf16 row's bits there
depend on the rows beside it; the native kernel's each output element is one multiply-add
chain over k in order, whatever the row count.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
from flax import nnx

from claimbench.kernels import native_dense
from claimbench.kernels.native_attention import prefill_path, vector_isa
from claimbench.models.llama import MLP, Embedding, LlamaForCausalLM
from claimbench.models.quantize import set_child

DENSE_ENV = "CLAIMBENCH_NATIVE_DENSE"
DENSE_PATHS = ("native", "xla")


class PackedLinear(nnx.Module):
    """An ``nnx.Linear`` whose kernel [in, out] is held as the dense kernel's f32 panels; its
    product is rounded to ``out_dtype``, the dtype the Linear's own dot returns."""

    def __init__(
        self, packed: jax.Array, n_out: int, bias: jax.Array | None, out_dtype: jnp.dtype
    ) -> None:
        self.packed = nnx.Param(packed)  # f32[ceil(out / 32), in, 32]
        self.bias = nnx.Param(bias) if bias is not None else nnx.data(None)  # f[out] or None
        self.n_out = n_out
        self.out_dtype = jnp.dtype(out_dtype)

    @classmethod
    def from_linear(cls, linear: nnx.Linear) -> PackedLinear:
        kernel = linear.kernel[...]
        bias = linear.bias[...] if linear.bias is not None else None
        out_dtype = linear.dtype if linear.dtype is not None else kernel.dtype
        return cls(native_dense.pack(kernel), kernel.shape[1], bias, out_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        y = native_dense.dense(x, self.packed[...], self.n_out).astype(self.out_dtype)
        return y + self.bias[...] if self.bias is not None else y


class PackedMLP(nnx.Module):
    """A llama ``MLP`` of f32 Linears without bias: silu(x @ gate) * (x @ up) in one native
    call on the two weights packed together (native_dense.pack_gated), then the down
    projection. The same products as the MLP's three Linears and XLA's silu, to rounding."""

    def __init__(self, gate_up: jax.Array, n_hidden: int, down_proj: PackedLinear) -> None:
        self.gate_up = nnx.Param(gate_up)  # f32[ceil(hidden / 16), in, 32]
        self.n_hidden = n_hidden
        self.down_proj = down_proj

    @classmethod
    def fusable(cls, mlp: nnx.Module) -> bool:
        """Whether ``mlp`` is a llama MLP whose gate and up are f32 Linears without bias:
        its own silu and product run in f32 too, so fusing them changes only the rounding
        (a bf16 model's product is rounded to bf16 before its silu; left unfused)."""
        if not isinstance(mlp, MLP):
            return False
        return all(
            isinstance(lin, nnx.Linear)
            and lin.bias is None
            and lin.kernel[...].dtype == jnp.float32
            and jnp.dtype(lin.dtype or lin.kernel[...].dtype) == jnp.float32
            for lin in (mlp.gate_proj, mlp.up_proj, mlp.down_proj)
        )

    @classmethod
    def from_mlp(cls, mlp: MLP) -> PackedMLP:
        gate, up = mlp.gate_proj.kernel[...], mlp.up_proj.kernel[...]
        packed = native_dense.pack_gated(gate, up)
        return cls(packed, gate.shape[1], PackedLinear.from_linear(mlp.down_proj))

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down_proj(native_dense.dense_gated(x, self.gate_up[...], self.n_hidden))


class PackedEmbedding(nnx.Module):
    """The token-embedding table, and the tied head packed from its transpose."""

    def __init__(self, table: jax.Array) -> None:
        self.embedding = nnx.Param(table)  # f[vocab, dim] in the model dtype, for lookups
        self.head = nnx.Param(native_dense.pack(table.T))  # f32[ceil(vocab / 32), dim, 32]
        self.vocab_size = table.shape[0]

    def __call__(self, token_ids: jax.Array) -> jax.Array:
        return jnp.take(self.embedding[...], token_ids, axis=0)

    def attend(self, hidden: jax.Array) -> jax.Array:
        """Tied output head: f[..., dim] -> logits f32[..., vocab] (the f32 logits that
        ``Embedding.attend`` returns)."""
        return native_dense.dense(hidden, self.head[...], self.vocab_size)


def dense_path(model: LlamaForCausalLM, *, batch_invariant: bool = False) -> str:
    """The matmul a "cpu"-backend runner uses for ``model``: ``DENSE_ENV`` if set, else
    "native" for an f32 model on a CPU with vector multiply-add (``vector_isa``: the
    kernel's tiles are sized to AVX-512 or AVX2) where the native kernels build, and "xla"
    otherwise. ``batch_invariant``: "native" for a model of any float dtype, or ValueError
    saying why it cannot be (``invariant_refusal``). ValueError names a bad value."""
    forced = os.environ.get(DENSE_ENV)
    if forced and forced not in DENSE_PATHS:
        raise ValueError(f"{DENSE_ENV}={forced!r}: expected one of {DENSE_PATHS}")
    if batch_invariant:
        if (reason := invariant_refusal(model, forced)) is not None:
            raise ValueError(f"batch_invariant is unavailable here: {reason}")
        return "native"
    if forced == "xla" or jnp.dtype(model.dtype) != jnp.float32:
        return "xla"
    if not any(isinstance(m, nnx.Linear) for _, m in nnx.iter_modules(model)):
        return "xla"  # quantized: its matrices are not f32 Linears
    if forced == "native" or vector_isa():
        return "native" if native_dense.unavailable_reason() is None else "xla"
    return "xla"


def invariant_refusal(model: LlamaForCausalLM, forced_dense: str | None) -> str | None:
    """None when every matmul and attention of ``model`` can take a batch-invariant kernel
    on this host, else why not. XLA's prefill attention pads and blocks by the step's
    shapes, so the native prefill kernel is required too."""
    if forced_dense == "xla":
        return f"{DENSE_ENV}=xla forces XLA's dot"
    if (reason := native_dense.unavailable_reason()) is not None:
        return reason
    if not any(isinstance(m, nnx.Linear) for _, m in nnx.iter_modules(model)):
        return "the model's matrices are quantized, not float Linears"
    if prefill_path() != "native":
        return "prefill attention is XLA's here (no AVX2/AVX-512, or CLAIMBENCH_NATIVE_PREFILL)"
    return None


def pack_model(model: LlamaForCausalLM) -> LlamaForCausalLM:
    """A copy of ``model`` with every float ``nnx.Linear`` packed, each f32 MLP's gate and up
    packed together (``PackedMLP``), and its embedding too where it is the (tied) output
    head."""
    model = nnx.clone(model)
    for path, module in list(nnx.iter_modules(model)):
        if PackedMLP.fusable(module):
            set_child(model, path, PackedMLP.from_mlp(module))
    for path, module in list(nnx.iter_modules(model)):
        if isinstance(module, nnx.Linear) and jnp.issubdtype(
            module.kernel[...].dtype, jnp.floating
        ):
            set_child(model, path, PackedLinear.from_linear(module))
    table = model.embed_tokens
    tied = model.lm_head is None and isinstance(table, Embedding)
    if tied and jnp.issubdtype(table.embedding[...].dtype, jnp.floating):
        model.embed_tokens = PackedEmbedding(table.embedding[...])
    return model
