"""Pages stored with head_dim padded to 128 lanes (what the engine allocates for the Pallas
kernel, so TPU needs no relayout copy) give the results of pages at the model's head_dim,
and the padded lanes stay zero. Interpret mode on CPU."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from test_ragged_paged_attention import INTERPRET, as_f32, make_step, num_real_tokens

from claimbench.engine.kv.kv_cache import page_layout
from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.pallas_rpa import page_head_dim, ragged_paged_attention
from claimbench.models.config import ModelConfig


@pytest.mark.slow
def test_page_head_dim_rounds_up_to_whole_lane_tiles() -> None:
    assert [page_head_dim(d) for d in (16, 64, 128, 192)] == [128, 128, 128, 256]
    cfg = ModelConfig(
        vocab_size=8,
        hidden_size=64,
        intermediate_size=8,
        num_layers=1,
        num_heads=1,
        num_kv_heads=1,
        head_dim=64,
    )
    assert page_layout(cfg, "pallas").head_dim == 128
    assert page_layout(cfg, "cpu") is cfg and page_layout(cfg, "xla") is cfg


@pytest.mark.slow
@pytest.mark.parametrize("kv", ["bf16", "int8"])
def test_lane_padded_pages_match_unpadded(kv: str) -> None:
    q, k, v, cache, md = make_step(
        3,
        decode=[5, 17],
        prefill=[6],
        mixed=[(3, 12)],
        page_size=4,
        num_q_heads=4,
        num_kv_heads=2,
        head_dim=64,
        kv=kv,
    )
    lanes = ((0, 0), (0, 0), (0, 0), (0, 64))
    padded = LayerKV(jnp.pad(cache.pages, lanes), cache.scales)
    options = dict(sm_scale=0.125, interpret=INTERPRET)
    out, new = ragged_paged_attention(q, k, v, cache, md, **options)
    out_p, new_p = ragged_paged_attention(q, k, v, padded, md, **options)
    n = num_real_tokens(md)
    assert out_p.shape == out.shape
    np.testing.assert_allclose(as_f32(out_p[:n]), as_f32(out[:n]), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(as_f32(new_p.pages[..., :64]), as_f32(new.pages))
    assert not np.any(as_f32(new_p.pages[..., 64:]))
    if kv == "int8":
        np.testing.assert_array_equal(np.asarray(new_p.scales), np.asarray(new.scales))
