"""The serving forward with early exit (CALM, Schuster et al. 2022) over the paged KV cache.

After each exit layer (exit_heads.py) every still-running token's confidence is the max
softmax probability of its exit head's distribution; a token whose confidence reaches the
threshold exits there, and its next token is drawn from that head. Later layers still need
its K/V, so that later tokens can attend to it: as CALM does, the exited hidden state is
propagated, i.e. it becomes the input of every later layer for that token, and each later
layer's K/V projections (input norm, k/v projection, RoPE) of it are written into the cache.

The layers run one after another, each behind a ``lax.cond``: while any real token is still
running the layer runs in full (exited tokens keep their hidden state, their K/V come from
it); once every real token has exited the remaining layers only write the propagated K/V.
So a batch of one stops at its token's exit, and a batch of 32 runs every layer until its
slowest token exits: the step's cost follows its least confident sequence.

Only decode-only steps exit: in a step holding a prefill chunk no token is eligible, so
prefill always runs the full model.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from claimbench.kernels.backend import AttentionBackend
from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import AttentionMetadata
from claimbench.kernels.paged_io import write_kv
from claimbench.models.exit_heads import ExitHeads, load_exit_heads
from claimbench.models.llama import DecoderLayer, LlamaForCausalLM, Rope, rope_angles, rope_inv_freq


def with_exit_heads(model: LlamaForCausalLM, model_dir: Path) -> LlamaForCausalLM:
    """A copy of ``model``'s module tree (sharing its arrays) with the exit heads saved in
    ``model_dir`` attached as ``exit_heads``, so they travel in its weight tree."""
    served = nnx.merge(*nnx.split(model))
    served.exit_heads = load_exit_heads(model_dir, model)
    return served


class EarlyExitOutput(NamedTuple):
    hidden: jax.Array  # f[T, hidden] normed for the LM head: the exit head's, or the final norm's
    kv_caches: list[LayerKV]  # every layer's cache, propagated K/V included
    exit_layers: jax.Array  # i32[T] layers each token ran (num_layers: no exit; padding: 0)


class _Carry(NamedTuple):
    x: jax.Array  # f[T, hidden] residual stream; frozen for exited tokens
    out: jax.Array  # f[T, hidden] exit heads' normed hidden of exited tokens
    done: jax.Array  # b[T] exited, or padding
    exit_layers: jax.Array  # i32[T]


def eligible_tokens(md: AttentionMetadata, num_tokens: int) -> tuple[jax.Array, jax.Array]:
    """(real b[T], eligible b[T]): tokens of real sequences, and those that may exit (every
    real token of a decode-only step; none in a step with a prefill or mixed chunk)."""
    num_seqs = md.num_seqs[0]
    real = jnp.arange(num_tokens) < md.cu_q_lens[num_seqs]
    decode_only = (md.distribution[0] == md.distribution[2]) & (num_seqs > 0)
    return real, real & decode_only


def confidence(model: LlamaForCausalLM, hidden: jax.Array) -> jax.Array:
    """f[T, hidden] (normed) -> f32[T] max softmax probability of the next token."""
    logits = model.logits(hidden).astype(jnp.float32)
    return jnp.exp(jnp.max(jax.nn.log_softmax(logits, axis=-1), axis=-1))


def propagate_kv(
    layer: DecoderLayer, x: jax.Array, angles: Rope, cache: LayerKV, slot_mapping: jax.Array
) -> LayerKV:
    """Write the layer's K/V of hidden state x f[T, hidden] into its cache, attending nothing."""
    _, k, v = layer.self_attn._qkv(layer.input_layernorm(x), angles)
    page_head_dim = cache.pages.shape[-1]
    if page_head_dim > k.shape[-1]:  # pages lane-padded for the Pallas kernel
        pad = [(0, 0), (0, 0), (0, page_head_dim - k.shape[-1])]
        k, v = jnp.pad(k, pad), jnp.pad(v, pad)
    return write_kv(cache, k, v, slot_mapping)


def early_exit_forward(
    model: LlamaForCausalLM,
    heads: ExitHeads,
    threshold: float,
    token_ids: jax.Array,
    positions: jax.Array,
    kv_caches: list[LayerKV],
    md: AttentionMetadata,
    *,
    attention: AttentionBackend,
    rope: Rope | None = None,
) -> EarlyExitOutput:
    """One engine step with early exit: token_ids i32[T], positions i32[T], one LayerKV per
    layer -> EarlyExitOutput. ``threshold``: a token exits at the first exit head whose max
    softmax probability is >= threshold (above 1: never; 0: at the first head)."""
    num_layers = len(model.layers)
    if len(kv_caches) != num_layers:
        raise ValueError(f"got {len(kv_caches)} KV caches for {num_layers} layers")
    num_tokens = token_ids.shape[0]
    if rope is None:
        angles = rope_angles(positions, rope_inv_freq(model.cfg))
    else:
        angles = Rope(rope.cos[positions], rope.sin[positions])
    real, eligible = eligible_tokens(md, num_tokens)
    x = model.embed_tokens(token_ids)
    carry = _Carry(x, jnp.zeros_like(x), ~real, jnp.zeros(num_tokens, jnp.int32))
    new_caches = []
    for index, (layer, cache) in enumerate(zip(model.layers, kv_caches, strict=True)):
        head = heads.head_after(index + 1)

        def run(carry: _Carry, cache: LayerKV, layer=layer, head=head, index=index):
            y, cache = layer(carry.x, angles, cache, md, attention)
            running = ~carry.done
            x = jnp.where(running[:, None], y, carry.x)
            exit_layers = jnp.where(running, index + 1, carry.exit_layers)
            done, out = carry.done, carry.out
            if head is not None:
                h = head(x)
                exits = running & eligible & (confidence(model, h) >= threshold)
                done = done | exits
                out = jnp.where(exits[:, None], h, out)
            return _Carry(x, out, done, exit_layers), cache

        def propagate(carry: _Carry, cache: LayerKV, layer=layer):
            return carry, propagate_kv(layer, carry.x, angles, cache, md.slot_mapping)

        carry, cache = jax.lax.cond(jnp.all(carry.done), propagate, run, carry, cache)
        new_caches.append(cache)
    exited = carry.done & real
    hidden = jnp.where(exited[:, None], carry.out, model.norm(carry.x))
    return EarlyExitOutput(hidden, new_caches, jnp.where(real, carry.exit_layers, 0))
