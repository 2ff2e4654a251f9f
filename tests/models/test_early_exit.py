"""Early exit over the paged cache (models/early_exit.py): tokens, exit layers, propagated K/V."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from claimbench.kernels.backend import get_backend
from claimbench.kernels.kv_quant import LayerKV, split_kv
from claimbench.kernels.metadata import NULL_PAGE, AttentionMetadata
from claimbench.models.config import ModelConfig
from claimbench.models.early_exit import confidence, early_exit_forward
from claimbench.models.exit_heads import ExitHeads
from claimbench.models.llama import LlamaForCausalLM, rope_angles, rope_inv_freq

CFG = ModelConfig(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=48,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    rope_theta=500.0,
)
EXITS = (1, 2, 3)
PAGE_SIZE, PAGES_PER_SEQ, NUM_PAGES = 4, 4, 24
PROMPTS = [[5, 9, 14, 3, 7], [60, 2, 33], [11, 11, 11, 11, 40, 41], [90, 17]]
ATTENTION = get_backend("xla")


@pytest.fixture(scope="module")
def model_and_heads() -> tuple[LlamaForCausalLM, ExitHeads]:
    model = LlamaForCausalLM(CFG, dtype=jnp.float32, rngs=nnx.Rngs(0))
    heads = ExitHeads(model, EXITS)
    # A sharper first head, so confidences spread over (0, 1) and thresholds separate tokens.
    heads.heads[0].adapter.kernel[...] = 20.0 * jnp.eye(CFG.hidden_size)
    heads.heads[1].adapter.kernel[...] = 20.0 * jnp.eye(CFG.hidden_size)
    return model, heads


def _metadata(seqs: list[tuple[int, int]], num_tokens: int, num_slots: int):
    """seqs: (sequence index, kv length before) of one new token each for decode, or the whole
    prompt (before = 0). Returns (token_ids, positions, md); sequence i owns pages 1 + 4i..."""
    tokens, positions, slots, cu, kv_lens, counts = [], [], [], [0], [], [0, 0, 0]
    table = np.full((num_slots, PAGES_PER_SEQ), NULL_PAGE, np.int32)
    for row, (seq, before) in enumerate(seqs):
        pages = [1 + PAGES_PER_SEQ * seq + p for p in range(PAGES_PER_SEQ)]
        table[row] = pages
        new = PROMPTS[seq] if before == 0 else [(seq * 13 + before) % CFG.vocab_size]
        counts[0 if before else 1] += 1
        for j, token in enumerate(new):
            pos = before + j
            tokens.append(token)
            positions.append(pos)
            slots.append(pages[pos // PAGE_SIZE] * PAGE_SIZE + pos % PAGE_SIZE)
        cu.append(len(tokens))
        kv_lens.append(before + len(new))
    num_real = len(tokens)
    tokens += [0] * (num_tokens - num_real)
    positions += [0] * (num_tokens - num_real)
    slots += [NULL_PAGE * PAGE_SIZE] * (num_tokens - num_real)
    cu += [num_real] * (num_slots - len(seqs))
    kv_lens += [0] * (num_slots - len(seqs))
    md = AttentionMetadata(
        slot_mapping=jnp.asarray(slots, jnp.int32),
        cu_q_lens=jnp.asarray(cu, jnp.int32),
        kv_lens=jnp.asarray(kv_lens, jnp.int32),
        page_indices=jnp.asarray(table),
        num_seqs=jnp.asarray([len(seqs)], jnp.int32),
        distribution=jnp.asarray(np.cumsum(counts), jnp.int32),
    )
    return jnp.asarray(tokens, jnp.int32), jnp.asarray(positions, jnp.int32), md


def _prefilled(model: LlamaForCausalLM) -> list[LayerKV]:
    """Caches holding every prompt, written by the ordinary forward."""
    shape = (NUM_PAGES, PAGE_SIZE, 2 * CFG.num_kv_heads, CFG.head_dim)
    caches = [LayerKV(jnp.zeros(shape, jnp.float32), None) for _ in range(CFG.num_layers)]
    tokens, positions, md = _metadata([(s, 0) for s in range(len(PROMPTS))], 32, 8)
    _, caches = model(tokens, positions, caches, md, attention=ATTENTION)
    return caches


def _decode(seqs: list[int]):
    return _metadata([(s, len(PROMPTS[s])) for s in seqs], 16, 8)


def _reference_exit_layers(model, heads, threshold, tokens, positions, caches, md) -> np.ndarray:
    """Exit layer of each real token from a plain loop over the ordinary layers: in a decode
    step every token is its own sequence's, so the first head reaching the threshold is its
    exit whatever the others do."""
    angles = rope_angles(positions, rope_inv_freq(CFG))
    x = model.embed_tokens(tokens)
    num_real = int(md.cu_q_lens[int(md.num_seqs[0])])
    exit_layers = np.full(num_real, CFG.num_layers)
    for index, (layer, cache) in enumerate(zip(model.layers, caches, strict=True)):
        x, _ = layer(x, angles, cache, md, ATTENTION)
        head = heads.head_after(index + 1)
        if head is None:
            continue
        conf = np.asarray(confidence(model, head(x)))[:num_real]
        newly = (conf >= threshold) & (exit_layers == CFG.num_layers)
        exit_layers[newly] = index + 1
    return exit_layers


@pytest.mark.slow
def test_threshold_above_one_is_the_ordinary_model(model_and_heads) -> None:
    model, heads = model_and_heads
    caches = _prefilled(model)
    tokens, positions, md = _decode([0, 1, 2, 3])
    hidden, want_caches = model(tokens, positions, caches, md, attention=ATTENTION)
    out = early_exit_forward(model, heads, 1.5, tokens, positions, caches, md, attention=ATTENTION)
    np.testing.assert_allclose(out.hidden[:4], hidden[:4], atol=1e-6, rtol=0)
    np.testing.assert_array_equal(
        jnp.argmax(model.logits(out.hidden[:4]), -1), jnp.argmax(model.logits(hidden[:4]), -1)
    )
    for got, want in zip(out.kv_caches, want_caches, strict=True):
        # Page 0 is the null page padding writes into: its contents are never read.
        np.testing.assert_allclose(got.pages[1:], want.pages[1:], atol=1e-6, rtol=0)
    np.testing.assert_array_equal(out.exit_layers, [4, 4, 4, 4] + [0] * 12)


@pytest.mark.slow
def test_threshold_zero_exits_first_and_propagates_kv(model_and_heads) -> None:
    model, heads = model_and_heads
    caches = _prefilled(model)
    tokens, positions, md = _decode([0, 1, 2])
    out = early_exit_forward(model, heads, 0.0, tokens, positions, caches, md, attention=ATTENTION)
    np.testing.assert_array_equal(out.exit_layers, [1, 1, 1] + [0] * 13)
    angles = rope_angles(positions, rope_inv_freq(CFG))
    x1, _ = model.layers[0](model.embed_tokens(tokens), angles, caches[0], md, ATTENTION)
    np.testing.assert_allclose(out.hidden[:3], heads.heads[0](x1)[:3], atol=1e-5, rtol=0)
    slots = np.asarray(md.slot_mapping[:3])
    for layer, cache in zip(model.layers[1:], out.kv_caches[1:], strict=True):
        _, k, v = layer.self_attn._qkv(layer.input_layernorm(x1), angles)
        rows = cache.pages.reshape(NUM_PAGES * PAGE_SIZE, *cache.pages.shape[2:])[slots]
        got_k, got_v = split_kv(rows)
        np.testing.assert_allclose(got_k, k[:3], atol=1e-5, rtol=0)
        np.testing.assert_allclose(got_v, v[:3], atol=1e-5, rtol=0)


@pytest.mark.slow
def test_prefill_steps_never_exit(model_and_heads) -> None:
    model, heads = model_and_heads
    shape = (NUM_PAGES, PAGE_SIZE, 2 * CFG.num_kv_heads, CFG.head_dim)
    caches = [LayerKV(jnp.zeros(shape, jnp.float32), None) for _ in range(CFG.num_layers)]
    tokens, positions, md = _metadata([(0, 0), (1, 0)], 16, 8)
    out = early_exit_forward(model, heads, 0.0, tokens, positions, caches, md, attention=ATTENTION)
    num_real = len(PROMPTS[0]) + len(PROMPTS[1])
    np.testing.assert_array_equal(out.exit_layers[:num_real], [4] * num_real)


@pytest.mark.slow
def test_batch_runs_until_its_slowest_token(model_and_heads) -> None:
    """A confident token alone stops after the first layer; beside a never-confident one it
    still exits at the first layer, but the step runs every layer."""
    model, heads = model_and_heads
    caches = _prefilled(model)
    tokens, positions, md = _decode([0, 1, 2, 3])
    first = np.asarray(
        confidence(model, _layer_hidden(model, heads, tokens, positions, caches, md))
    )
    never = {s: _max_confidence(model, heads, s, caches) for s in range(4)}
    slow = min(never, key=never.get)
    fast = int(np.argmax(first[:4]))
    threshold = (never[slow] + first[fast]) / 2
    assert never[slow] < threshold <= first[fast], "the workload must separate two tokens"
    t, p, m = _decode([fast])
    out = early_exit_forward(model, heads, threshold, t, p, caches, m, attention=ATTENTION)
    assert int(out.exit_layers[0]) == 1
    t, p, m = _decode([fast, slow])
    out = early_exit_forward(model, heads, threshold, t, p, caches, m, attention=ATTENTION)
    assert out.exit_layers[:2].tolist() == [1, CFG.num_layers]


def _layer_hidden(model, heads, tokens, positions, caches, md):
    angles = rope_angles(positions, rope_inv_freq(CFG))
    x, _ = model.layers[0](model.embed_tokens(tokens), angles, caches[0], md, ATTENTION)
    return heads.heads[0](x)


def _max_confidence(model, heads, seq: int, caches) -> float:
    """The highest confidence any exit head gives sequence ``seq``'s decode token."""
    tokens, positions, md = _decode([seq])
    angles = rope_angles(positions, rope_inv_freq(CFG))
    x = model.embed_tokens(tokens)
    best = 0.0
    for index, (layer, cache) in enumerate(zip(model.layers, caches, strict=True)):
        x, _ = layer(x, angles, cache, md, ATTENTION)
        head = heads.head_after(index + 1)
        if head is not None:
            best = max(best, float(confidence(model, head(x))[0]))
    return best


@pytest.mark.slow
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_exit_layers_match_reference(model_and_heads, rank: int) -> None:
    model, heads = model_and_heads
    caches = _prefilled(model)
    tokens, positions, md = _decode([0, 1, 2, 3])
    angles = rope_angles(positions, rope_inv_freq(CFG))
    x, confs = model.embed_tokens(tokens), []
    for index, (layer, cache) in enumerate(zip(model.layers[:3], caches[:3], strict=True)):
        x, _ = layer(x, angles, cache, md, ATTENTION)
        confs.append(np.asarray(confidence(model, heads.heads[index](x)))[:4])
    # Between the rank-th and the next most confident first-head tokens: some exit there.
    first = np.sort(confs[0])
    threshold = float(first[rank - 1] + first[rank]) / 2
    want = _reference_exit_layers(model, heads, threshold, tokens, positions, caches, md)
    step = jax.jit(
        lambda caches: (
            early_exit_forward(
                model, heads, threshold, tokens, positions, caches, md, attention=ATTENTION
            ).exit_layers
        )
    )
    # The thresholds split the tokens: some exit early, some run on.
    assert len(set(want.tolist())) > 1
    np.testing.assert_array_equal(step(caches)[:4], want)
