"""The NNX decoder: paged serving path vs dense path, padding, RoPE, sizes, purity under jit."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from claimbench.kernels.backend import get_backend
from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import NULL_PAGE, AttentionMetadata
from claimbench.models.config import ModelConfig, RopeScaling
from claimbench.models.llama import (
    LlamaForCausalLM,
    param_count,
    rope_angles,
    rope_inv_freq,
    rotate,
    weight_bytes,
)

TINY = ModelConfig(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=48,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    rope_theta=500.0,
)
QWEN_TINY = dataclasses.replace(
    TINY, architecture="Qwen2ForCausalLM", attention_bias=True, tie_word_embeddings=True
)
LLAMA3_TINY = dataclasses.replace(
    TINY,
    rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, original_max_position_embeddings=16),
)
PAGE_SIZE = 4
PAGES_PER_SEQ = 6
NUM_PAGES = 32


def make_model(cfg: ModelConfig, seed: int = 0) -> LlamaForCausalLM:
    model = LlamaForCausalLM(cfg, dtype=jnp.float32, rngs=nnx.Rngs(seed))
    # Non-zero biases so the test sees them (nnx initialises biases to zero).
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        if path[-1] == "bias":
            var[...] = jax.random.normal(jax.random.key(len(path)), var.shape) * 0.1
    return model


def build_step(seqs, num_tokens_pad: int, num_seqs_pad: int):
    """Hand-built metadata for one step. seqs: (pages, kv_len_before, new_tokens) in
    decode-only, prefill-only, mixed order. Returns (token_ids, positions, md)."""
    tokens, positions, slots, cu_q_lens, kv_lens = [], [], [], [0], []
    page_indices = np.full((num_seqs_pad, PAGES_PER_SEQ), NULL_PAGE, np.int32)
    counts = [0, 0, 0]
    for i, (pages, before, new) in enumerate(seqs):
        group = 0 if (before > 0 and len(new) == 1) else (1 if before == 0 else 2)
        counts[group] += 1
        page_indices[i, : len(pages)] = pages
        for j, tok in enumerate(new):
            pos = before + j
            tokens.append(tok)
            positions.append(pos)
            slots.append(pages[pos // PAGE_SIZE] * PAGE_SIZE + pos % PAGE_SIZE)
        cu_q_lens.append(len(tokens))
        kv_lens.append(before + len(new))
    num_real = len(tokens)
    # Padded tokens write into the null page; padded sequence slots are empty.
    tokens += [0] * (num_tokens_pad - num_real)
    positions += [0] * (num_tokens_pad - num_real)
    slots += [NULL_PAGE * PAGE_SIZE + i % PAGE_SIZE for i in range(num_tokens_pad - num_real)]
    cu_q_lens += [num_real] * (num_seqs_pad - len(seqs))
    kv_lens += [0] * (num_seqs_pad - len(seqs))
    md = AttentionMetadata(
        slot_mapping=jnp.asarray(slots, jnp.int32),
        cu_q_lens=jnp.asarray(cu_q_lens, jnp.int32),
        kv_lens=jnp.asarray(kv_lens, jnp.int32),
        page_indices=jnp.asarray(page_indices),
        num_seqs=jnp.asarray([len(seqs)], jnp.int32),
        distribution=jnp.asarray(np.cumsum(counts), jnp.int32),
    )
    return jnp.asarray(tokens, jnp.int32), jnp.asarray(positions, jnp.int32), md


def empty_caches(cfg: ModelConfig) -> list[LayerKV]:
    shape = (NUM_PAGES, PAGE_SIZE, 2 * cfg.num_kv_heads, cfg.head_dim)
    return [LayerKV(jnp.zeros(shape, jnp.float32), None) for _ in range(cfg.num_layers)]


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [TINY, QWEN_TINY, LLAMA3_TINY], ids=["llama", "qwen2", "llama3"])
def test_paged_steps_match_dense(cfg: ModelConfig) -> None:
    """Two engine steps (prefill chunks, then decode + prefill + mixed) reproduce the dense
    logits of every full sequence at every scheduled position."""
    model = make_model(cfg)
    rng = np.random.default_rng(1)
    full = [rng.integers(2, cfg.vocab_size, n).tolist() for n in (9, 6, 13, 5)]
    pages = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10, 11]]
    attention = get_backend("xla")
    graphdef, state = nnx.split(model)

    @jax.jit
    def step(state, tokens, positions, caches, md):
        # Split/merge inside jit, as the engine does: the call must be pure in (state, inputs).
        m = nnx.merge(graphdef, state)
        hidden, caches = m(tokens, positions, caches, md, attention=attention)
        return m.logits(hidden), caches

    # Step 1: prefill seq 0 fully, seq 2 partly (8 of 13), seq 1 fully; seq 3 not yet.
    step1 = [(pages[0], 0, full[0][:8]), (pages[1], 0, full[1]), (pages[2], 0, full[2][:8])]
    # Step 2: decode seq 0 and 1, prefill seq 3, finish seq 2's prefill (a mixed chunk).
    step2 = [
        (pages[0], 8, full[0][8:9]),
        (pages[1], 6, [3]),
        (pages[3], 0, full[3]),
        (pages[2], 8, full[2][8:]),
    ]
    caches = empty_caches(cfg)
    dense = {i: model.forward_dense(jnp.asarray([seq + [3]]))[0] for i, seq in enumerate(full)}
    for seqs in (step1, step2):
        tokens, positions, md = build_step(seqs, num_tokens_pad=32, num_seqs_pad=6)
        logits, caches = step(state, tokens, positions, caches, md)
        for i, (seq_pages, before, new) in enumerate(seqs):
            seq = pages.index(seq_pages)
            start = int(md.cu_q_lens[i])
            ours = logits[start : start + len(new)]
            ref = dense[seq][before : before + len(new)]
            np.testing.assert_allclose(ours, ref, atol=2e-5, rtol=0)


@pytest.mark.slow
def test_dense_padding_left_and_right() -> None:
    """Padding on either side leaves the real tokens' logits unchanged."""
    model = make_model(QWEN_TINY)
    ids = [5, 9, 14, 3, 77]
    ref = model.forward_dense(jnp.asarray([ids]))[0]
    left = model.forward_dense(
        jnp.asarray([[0, 0, *ids]]), jnp.asarray([[False, False] + [True] * 5])
    )[0, 2:]
    right = model.forward_dense(
        jnp.asarray([[*ids, 0, 0, 0]]), jnp.asarray([[True] * 5 + [False] * 3])
    )[0, :5]
    np.testing.assert_allclose(left, ref, atol=1e-5, rtol=0)
    np.testing.assert_allclose(right, ref, atol=1e-5, rtol=0)


def test_rope_rotation_is_relative() -> None:
    """<rope(q, m), rope(k, n)> depends only on m - n (the property RoPE exists for)."""
    inv_freq = rope_inv_freq(TINY)
    q = jax.random.normal(jax.random.key(0), (1, TINY.head_dim))
    k = jax.random.normal(jax.random.key(1), (1, TINY.head_dim))

    def dot(m: int, n: int) -> float:
        qm = rotate(q, rope_angles(jnp.asarray(m), inv_freq))
        kn = rotate(k, rope_angles(jnp.asarray(n), inv_freq))
        return float(jnp.sum(qm * kn))

    assert dot(7, 3) == pytest.approx(dot(104, 100), abs=1e-4)
    assert dot(0, 0) == pytest.approx(float(jnp.sum(q * k)), abs=1e-5)


def test_llama3_rope_scaling_bands() -> None:
    """Llama-3 scaling keeps high frequencies, divides low ones by `factor`, blends between."""
    cfg = dataclasses.replace(TINY, head_dim=64, rope_theta=500000.0)
    scaled_cfg = dataclasses.replace(cfg, rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 8192))
    base, scaled = rope_inv_freq(cfg), rope_inv_freq(scaled_cfg)
    wavelen = 2 * np.pi / base
    high = wavelen < 8192 / 4
    low = wavelen > 8192 / 1
    np.testing.assert_array_equal(scaled[high], base[high])
    np.testing.assert_allclose(scaled[low], base[low] / 8.0, rtol=1e-6)
    mid = ~high & ~low
    assert mid.any()
    assert np.all((scaled[mid] < base[mid]) & (scaled[mid] > base[mid] / 8.0))


def test_param_count_and_bytes() -> None:
    # TINY untied: embed 97*32 + lm_head 32*97 + final norm 32
    # per layer: q 32*32 + k 32*16 + v 32*16 + o 32*32 = 3072; mlp 3*32*48 = 4608; norms 64
    expected = 2 * 97 * 32 + 32 + 2 * (3072 + 4608 + 64)
    model = make_model(TINY)
    assert param_count(model) == expected
    assert weight_bytes(model) == 4 * expected
    bf16 = LlamaForCausalLM(TINY, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    assert weight_bytes(bf16) == 2 * expected
    # Tied (Qwen2 tiny): no lm_head; q/k/v biases 32 + 16 + 16 per layer.
    assert param_count(make_model(QWEN_TINY)) == expected - 97 * 32 + 2 * 64


@pytest.mark.slow
def test_bf16_model_tracks_f32_and_logits_are_f32() -> None:
    f32_model = make_model(TINY)
    bf16_model = LlamaForCausalLM(TINY, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    # Same weights, rounded to bf16.
    nnx.update(
        bf16_model,
        jax.tree.map(lambda x: x.astype(jnp.bfloat16), nnx.state(f32_model, nnx.Param)),
    )
    ids = jnp.asarray([[1, 2, 3, 40, 50]])
    logits = bf16_model.forward_dense(ids)
    assert logits.dtype == jnp.float32 and logits.shape == (1, 5, TINY.vocab_size)
    np.testing.assert_allclose(logits, f32_model.forward_dense(ids), atol=0.02, rtol=0)


@pytest.mark.slow
def test_wrong_number_of_caches_raises() -> None:
    model = make_model(TINY)
    tokens, positions, md = build_step([([1], 0, [4, 5])], num_tokens_pad=4, num_seqs_pad=2)
    with pytest.raises(ValueError, match="got 1 KV caches for 2 layers"):
        model(tokens, positions, empty_caches(TINY)[:1], md, attention=get_backend("xla"))
