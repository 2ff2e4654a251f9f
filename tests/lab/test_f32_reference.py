"""The layer-by-layer float32 reference gives what a float32 engine's prompt pass gives."""

from __future__ import annotations

import numpy as np
import pytest
from precision_helpers import write_tiny_model

from claimbench.engine.build import build_engine
from claimbench.engine.config import EngineConfig
from claimbench.lab.quality.f32_reference import reference_pass
from claimbench.lab.quality.quality import heldout_windows, prompt_pass, top1_agreement_pct


@pytest.mark.slow
def test_matches_a_float32_engine(tmp_path):
    model_dir = write_tiny_model(tmp_path / "tiny")
    windows = heldout_windows(model_dir, 5, 40, 7)  # 5 windows: a partial last chunk too
    reference = reference_pass(model_dir, windows)
    engine = build_engine(
        EngineConfig(
            model_path=model_dir,
            dtype="float32",
            prefix_caching="off",
            max_model_len=41,
            kv_pool_bytes=2**20,
            max_num_batched_tokens=64,
        )
    )
    served = prompt_pass(engine, windows)
    assert reference.top1.shape == served.top1.shape == (5, 39)
    assert top1_agreement_pct(served, reference) == 100.0
    np.testing.assert_allclose(reference.logprobs, served.logprobs, atol=1e-4)
    assert reference.perplexity == pytest.approx(served.perplexity, rel=1e-5)


def test_refuses_windows_without_a_prediction(tmp_path):
    with pytest.raises(ValueError, match="length >= 2"):
        reference_pass(tmp_path, np.zeros((2, 1), np.int32))
