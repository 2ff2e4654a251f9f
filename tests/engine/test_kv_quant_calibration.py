"""fp8 KV scale calibration: the dense-path absmax equals what the paged path writes."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from engine_helpers import TINY_MODEL, tiny_model

from claimbench.engine.kv.calibration import fp8_kv_scales, kv_absmax
from claimbench.kernels.kv_quant import FP8_MAX, LayerKV, from_container
from claimbench.kernels.metadata import AttentionMetadata
from claimbench.kernels.reference import ragged_paged_attention

PAGE_SIZE = 8


def _paged_prefill_caches(model, tokens: np.ndarray) -> list[LayerKV]:
    """Prefill each row of tokens i32[B, S] as its own sequence into f32 caches."""
    batch, seq = tokens.shape
    pages_per_seq = seq // PAGE_SIZE
    num_pages = 1 + batch * pages_per_seq
    cfg = TINY_MODEL
    shape = (num_pages, PAGE_SIZE, 2 * cfg.num_kv_heads, cfg.head_dim)
    caches = [LayerKV(jnp.zeros(shape, jnp.float32), None) for _ in range(cfg.num_layers)]
    page_indices = 1 + np.arange(batch * pages_per_seq, dtype=np.int32).reshape(batch, -1)
    md = AttentionMetadata(
        slot_mapping=jnp.arange(PAGE_SIZE, PAGE_SIZE + batch * seq, dtype=jnp.int32),
        cu_q_lens=jnp.arange(0, (batch + 1) * seq, seq, dtype=jnp.int32),
        kv_lens=jnp.full((batch,), seq, jnp.int32),
        page_indices=jnp.asarray(page_indices),
        num_seqs=jnp.asarray([batch], jnp.int32),
        distribution=jnp.asarray([0, batch, batch], jnp.int32),
    )
    positions = jnp.tile(jnp.arange(seq, dtype=jnp.int32), batch)
    _, caches = model(
        jnp.asarray(tokens.reshape(-1)), positions, caches, md, attention=ragged_paged_attention
    )
    return caches


@pytest.mark.slow
def test_absmax_matches_what_the_paged_path_writes():
    model = tiny_model()
    tokens = np.random.default_rng(0).integers(0, TINY_MODEL.vocab_size, (2, 16)).astype(np.int32)
    caches = _paged_prefill_caches(model, tokens)
    written_k = max(
        float(jnp.abs(from_container(c.pages[1:, :, 0::2]).astype(jnp.float32)).max())
        for c in caches
    )
    written_v = max(
        float(jnp.abs(from_container(c.pages[1:, :, 1::2]).astype(jnp.float32)).max())
        for c in caches
    )
    k_max, v_max = kv_absmax(model, tokens)
    np.testing.assert_allclose([k_max, v_max], [written_k, written_v], rtol=1e-5)
    k_scale, v_scale = fp8_kv_scales(model, tokens)
    assert k_scale == pytest.approx(k_max / FP8_MAX) and v_scale == pytest.approx(v_max / FP8_MAX)


def test_rejects_an_empty_batch():
    with pytest.raises(ValueError, match="shape"):
        kv_absmax(tiny_model(), np.zeros((0, 4), np.int32))
