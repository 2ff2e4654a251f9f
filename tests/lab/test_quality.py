"""Quality through the engine: the prompt pass against a dense forward, and its summaries."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from engine_helpers import dense_logits, shared_tiny_engine, tiny_engine, tiny_model

from claimbench.engine.build import build_engine
from claimbench.engine.config import EngineConfig
from claimbench.lab.quality.quality import (
    PromptPass,
    heldout_windows,
    ppl_delta_pct,
    prompt_pass,
    top1_agreement_pct,
)
from claimbench.models.checkpoint import default_model_path
from claimbench.models.llama import weight_bytes
from claimbench.models.quantize import quantize_weights

WINDOWS = np.random.default_rng(0).integers(3, 97, size=(3, 40)).astype(np.int32)


@pytest.fixture(scope="module")
def f32_pass():
    return prompt_pass(shared_tiny_engine(prefix_caching="off"), WINDOWS)


def test_prompt_pass_matches_a_dense_forward(f32_pass):
    # 40-token windows run as chunked prefills (32-token step budget) over 8-token pages.
    model = tiny_model()
    assert f32_pass.logprobs.shape == f32_pass.top1.shape == (3, 39)
    for i, window in enumerate(WINDOWS):
        logp = np.asarray(jax.nn.log_softmax(dense_logits(model, window.tolist()), axis=-1))
        np.testing.assert_allclose(f32_pass.logprobs[i], logp[np.arange(39), window[1:]], atol=1e-4)
        top2 = np.sort(logp[:39], axis=-1)[:, -2:]
        clear = top2[:, 1] - top2[:, 0] > 1e-3  # skip near-ties, where rounding may decide
        np.testing.assert_array_equal(f32_pass.top1[i][clear], logp[:39].argmax(-1)[clear])


def test_summaries_hand_computed():
    # Log-probs log(1/2) and log(1/8): mean NLL = 2 ln 2, so perplexity = 4.
    ref = PromptPass(np.log([[0.5, 0.125]], dtype=np.float32), np.array([[1, 2]], np.int32))
    cand = PromptPass(np.log([[0.25, 0.125]], dtype=np.float32), np.array([[1, 3]], np.int32))
    assert ref.perplexity == pytest.approx(4.0)
    assert cand.perplexity == pytest.approx(np.sqrt(32))
    assert ppl_delta_pct(cand, ref) == pytest.approx(100 * (np.sqrt(32) / 4 - 1))
    assert top1_agreement_pct(cand, ref) == 50.0
    with pytest.raises(ValueError, match="different windows"):
        top1_agreement_pct(cand, PromptPass(ref.logprobs[:, :1], ref.top1[:, :1]))


@pytest.mark.slow
def test_quantized_engine_costs_a_little_and_reports_real_weight_bytes(f32_pass):
    engine = tiny_engine(prefix_caching="off", weights="int8", kv_dtype="int8")
    quant = prompt_pass(engine, WINDOWS)
    assert 0 < abs(ppl_delta_pct(quant, f32_pass)) < 2.0
    assert top1_agreement_pct(quant, f32_pass) >= 90.0
    held = engine.stats().weight_bytes
    assert held == weight_bytes(quantize_weights(tiny_model(), "int8"))
    assert held < 0.3 * weight_bytes(tiny_model())  # f32 -> int8 + scales


@pytest.mark.slow
@pytest.mark.parametrize("kv_dtype", ["int8", "fp8"])
def test_quantized_kv_changes_the_shipped_models_perplexity(kv_dtype):
    # The shipped model, held-out text: the quantized cache must really round K and V (a
    # nonzero perplexity change) without breaking the model (a small one).
    windows = heldout_windows(default_model_path(), 2, 48, 0)
    options = {"prefix_caching": "off", "kv_pool_bytes": 2**22, "max_model_len": 64}
    ref = prompt_pass(build_engine(EngineConfig(kv_dtype="bf16", **options)), windows)
    extra = {"kv_scale": "calibrate"} if kv_dtype == "fp8" else {}
    quant = prompt_pass(build_engine(EngineConfig(kv_dtype=kv_dtype, **options, **extra)), windows)
    assert 0 < abs(ppl_delta_pct(quant, ref)) < 5
    assert not np.array_equal(quant.logprobs, ref.logprobs)


@pytest.mark.slow
def test_prompt_pass_refuses_a_prefix_cached_or_truncated_pass():
    with pytest.raises(ValueError, match="shape"):
        prompt_pass(shared_tiny_engine(prefix_caching="off"), WINDOWS[0])
    too_long = np.zeros((1, 128), np.int32)  # 128 + 1 output > max_model_len=128: rejected
    with pytest.raises(ValueError, match="served in full"):
        prompt_pass(shared_tiny_engine(prefix_caching="off"), too_long)
