"""A decoder-only transformer in Flax NNX covering LlamaForCausalLM and Qwen2ForCausalLM.

RMSNorm, RoPE (with Llama-3 / linear scaling), grouped-query attention, SwiGLU MLP,
optional q/k/v bias (Qwen2), tied or untied embeddings. Two entry points share the
weights:

- ``__call__``: the serving path over the engine's flattened ragged batch, with a paged
  KV cache per layer and an attention backend (kernels/backend.py). Pure given
  (state, inputs), so the engine can ``nnx.split`` once and ``nnx.merge`` inside jit.
- ``forward_dense``: plain causal attention over a padded [batch, seq] block, for
  training and as the reference the paged path is tested against.

Every projection is an ``nnx.Linear`` (a matmul on a ``kernel`` param of shape
[in, out]), so weight-only quantization that intercepts dot_general applies to all.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from claimbench.kernels.backend import AttentionBackend
from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import AttentionMetadata
from claimbench.kernels.reference import dense_causal_attention
from claimbench.models.config import ModelConfig

INIT_STD = 0.02  # transformers' initializer_range for Llama / Qwen2


def rope_inv_freq(cfg: ModelConfig) -> np.ndarray:
    """f32[head_dim // 2] inverse frequencies, with the config's rope scaling applied.

    Computed in numpy at trace time: a per-model constant, so positions are the only
    runtime input and no [max_positions, head_dim] table is ever materialized.
    """
    dim = cfg.head_dim
    exponents = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    inv_freq = (1.0 / np.float32(cfg.rope_theta) ** exponents).astype(np.float32)
    scaling = cfg.rope_scaling
    if scaling is None:
        return inv_freq
    if scaling.rope_type == "linear":
        return (inv_freq / np.float32(scaling.factor)).astype(np.float32)
    # Llama-3: long wavelengths are slowed by `factor`, short ones kept, the band between
    # interpolated smoothly (transformers' _compute_llama3_parameters).
    old_len = scaling.original_max_position_embeddings
    low_freq_wavelen = old_len / scaling.low_freq_factor
    high_freq_wavelen = old_len / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = (old_len / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return np.where(is_medium, smoothed, scaled).astype(np.float32)


class Rope(NamedTuple):
    """cos and sin of every token's rotation angles: f32[..., head_dim // 2] each."""

    cos: jax.Array
    sin: jax.Array


def rope_angles(positions: jax.Array, inv_freq: np.ndarray) -> Rope:
    angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # [..., D/2]
    return Rope(jnp.cos(angles), jnp.sin(angles))


def rope_table(cfg: ModelConfig, length: int) -> Rope:
    """cos and sin for positions 0..length-1 (numpy, f32[length, head_dim // 2] each).

    The engine gathers its step's rows from this table: computed in the step instead,
    XLA:CPU fuses cos and sin into every layer's rotation and evaluates them once per
    element of q and k (about 2 ms a layer for a 2048-token step on two cores).
    """
    angles = np.arange(length, dtype=np.float32)[:, None] * rope_inv_freq(cfg)[None, :]
    return Rope(np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32))


def rotate(x: jax.Array, rope: Rope) -> jax.Array:
    """Rotate x f[..., H, D] by its tokens' angles (half-split layout, as transformers)."""
    cos = rope.cos[..., None, :].astype(x.dtype)
    sin = rope.sin[..., None, :].astype(x.dtype)
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _linear(
    n_in: int, n_out: int, *, bias: bool, dtype, rngs: nnx.Rngs, out_dtype=None
) -> nnx.Linear:
    return nnx.Linear(
        n_in,
        n_out,
        use_bias=bias,
        dtype=dtype,
        param_dtype=dtype,
        preferred_element_type=out_dtype,
        kernel_init=nnx.initializers.normal(INIT_STD),
        rngs=rngs,
    )


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, eps: float, *, dtype) -> None:
        self.weight = nnx.Param(jnp.ones((dim,), dtype))
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:
        # Normalize in f32 and scale in the activation dtype, exactly as transformers does.
        xf = x.astype(jnp.float32)
        xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        return self.weight[...] * xf.astype(x.dtype)


class Embedding(nnx.Module):
    def __init__(self, vocab_size: int, dim: int, *, dtype, rngs: nnx.Rngs) -> None:
        init = nnx.initializers.normal(INIT_STD)
        self.embedding = nnx.Param(init(rngs.params(), (vocab_size, dim), dtype))

    def __call__(self, token_ids: jax.Array) -> jax.Array:
        return jnp.take(self.embedding[...], token_ids, axis=0)

    def attend(self, hidden: jax.Array) -> jax.Array:
        """Tied output head: f[..., dim] -> logits f32[..., vocab_size]."""
        emb = self.embedding[...]
        return jnp.einsum("...d,vd->...v", hidden, emb, preferred_element_type=jnp.float32)


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs) -> None:
        d, hd = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, hd
        self.q_proj = _linear(d, cfg.num_heads * hd, bias=cfg.qkv_bias, dtype=dtype, rngs=rngs)
        self.k_proj = _linear(d, cfg.num_kv_heads * hd, bias=cfg.qkv_bias, dtype=dtype, rngs=rngs)
        self.v_proj = _linear(d, cfg.num_kv_heads * hd, bias=cfg.qkv_bias, dtype=dtype, rngs=rngs)
        self.o_proj = _linear(cfg.num_heads * hd, d, bias=cfg.o_bias, dtype=dtype, rngs=rngs)
        self.cfg = cfg
        self.sm_scale = hd**-0.5

    def _qkv(self, x: jax.Array, positions: jax.Array | Rope):
        """x f[..., hidden], positions i32[...] or their Rope -> q [..Hq, D], k/v [..Hkv, D]."""
        lead = x.shape[:-1]
        q = self.q_proj(x).reshape(*lead, self.num_heads, self.head_dim)
        k = self.k_proj(x).reshape(*lead, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).reshape(*lead, self.num_kv_heads, self.head_dim)
        if isinstance(positions, Rope):
            rope = positions
        else:
            rope = rope_angles(positions, rope_inv_freq(self.cfg))
        return rotate(q, rope), rotate(k, rope), v

    def __call__(
        self,
        x: jax.Array,
        positions: jax.Array,
        cache: LayerKV,
        md: AttentionMetadata,
        attention: AttentionBackend,
    ) -> tuple[jax.Array, LayerKV]:
        """Paged path: x f[T, hidden] -> (f[T, hidden], cache with this step's K/V)."""
        q, k, v = self._qkv(x, positions)
        out, cache = attention(q, k, v, cache, md, sm_scale=self.sm_scale)
        return self.o_proj(out.reshape(x.shape[0], -1)), cache

    def dense(self, x: jax.Array, positions: jax.Array, valid: jax.Array | None) -> jax.Array:
        """Dense causal path: x f[B, S, hidden] -> f[B, S, hidden]."""
        q, k, v = self._qkv(x, positions)
        out = dense_causal_attention(q, k, v, sm_scale=self.sm_scale, kv_valid=valid)
        return self.o_proj(out.reshape(*x.shape[:2], -1))


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs) -> None:
        d, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = _linear(d, f, bias=False, dtype=dtype, rngs=rngs)
        self.up_proj = _linear(d, f, bias=False, dtype=dtype, rngs=rngs)
        self.down_proj = _linear(f, d, bias=False, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs) -> None:
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype)
        self.self_attn = Attention(cfg, dtype=dtype, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype)
        self.mlp = MLP(cfg, dtype=dtype, rngs=rngs)

    def __call__(self, x, positions, cache, md, attention):
        h, cache = self.self_attn(self.input_layernorm(x), positions, cache, md, attention)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x)), cache

    def dense(self, x, positions, valid):
        x = x + self.self_attn.dense(self.input_layernorm(x), positions, valid)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(nnx.Module):
    """Llama / Qwen2 decoder. Params and activations in ``dtype``; logits always f32."""

    def __init__(self, cfg: ModelConfig, *, dtype=jnp.bfloat16, rngs: nnx.Rngs) -> None:
        self.cfg = cfg
        self.dtype = jnp.dtype(dtype)
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, dtype=dtype, rngs=rngs)
        self.layers = nnx.List(
            [DecoderLayer(cfg, dtype=dtype, rngs=rngs) for _ in range(cfg.num_layers)]
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype)
        self.lm_head = (
            None
            if cfg.tie_word_embeddings
            else _linear(
                cfg.hidden_size,
                cfg.vocab_size,
                bias=False,
                dtype=dtype,
                rngs=rngs,
                out_dtype=jnp.float32,  # logits in f32
            )
        )

    def __call__(
        self,
        token_ids: jax.Array,
        positions: jax.Array,
        kv_caches: list[LayerKV],
        md: AttentionMetadata,
        *,
        attention: AttentionBackend,
        rope: Rope | None = None,
    ) -> tuple[jax.Array, list[LayerKV]]:
        """One engine step over the flattened ragged batch.

        token_ids i32[T], positions i32[T], kv_caches one LayerKV per layer, md for the
        step -> (final-normed hidden f[T, hidden_size], updated kv_caches). Call
        ``logits`` on just the rows that need sampling. ``rope``: a ``rope_table`` covering
        every position (device arrays), read instead of computing the angles.
        """
        if len(kv_caches) != len(self.layers):
            raise ValueError(f"got {len(kv_caches)} KV caches for {len(self.layers)} layers")
        x = self.embed_tokens(token_ids)
        if rope is None:
            angles = rope_angles(positions, rope_inv_freq(self.cfg))
        else:
            angles = Rope(rope.cos[positions], rope.sin[positions])
        new_caches = []
        for layer, cache in zip(self.layers, kv_caches, strict=True):
            x, cache = layer(x, angles, cache, md, attention)
            new_caches.append(cache)
        return self.norm(x), new_caches

    def logits(self, hidden: jax.Array) -> jax.Array:
        """f[..., hidden_size] (already final-normed) -> f32[..., vocab_size].

        Through the head modules (not their raw matrices), so a quantized head
        (models/quantize.py) serves as is.
        """
        if self.lm_head is None:
            return self.embed_tokens.attend(hidden)
        return self.lm_head(hidden)

    def hidden_dense(self, token_ids: jax.Array, valid: jax.Array | None = None) -> jax.Array:
        """token_ids i32[B, S] -> final-normed hidden f[B, S, hidden_size] (causal, dense)."""
        if valid is None:
            positions = jnp.broadcast_to(jnp.arange(token_ids.shape[1]), token_ids.shape)
        else:
            # Padding may sit on either side: each real token's position counts real tokens.
            positions = jnp.maximum(jnp.cumsum(valid.astype(jnp.int32), axis=1) - 1, 0)
        x = self.embed_tokens(token_ids)
        for layer in self.layers:
            x = layer.dense(x, positions, valid)
        return self.norm(x)

    def forward_dense(self, token_ids: jax.Array, valid: jax.Array | None = None) -> jax.Array:
        """token_ids i32[B, S], valid b[B, S] (False = padding) -> logits f32[B, S, vocab]."""
        return self.logits(self.hidden_dense(token_ids, valid))


def param_count(model: nnx.Module) -> int:
    """Number of parameters (tied embeddings counted once)."""
    return sum(int(x.size) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def weight_bytes(model: nnx.Module) -> int:
    """Bytes the parameters occupy in their stored dtypes (quantized leaves included)."""
    return sum(int(x.size) * x.dtype.itemsize for x in jax.tree.leaves(nnx.state(model)))
