"""The whole engine on the Pallas attention kernel (TPU interpret mode on CPU) against XLA.

A tiny random f32 model, greedy decoding: every step's attention goes through the kernel's
decode path, prefill path and chunked (mixed) prefill, with the KV written by the kernel,
and the tokens must be exactly those of the same engine on the XLA attention path.
"""

from __future__ import annotations

import numpy as np
import pytest
from engine_helpers import tiny_engine, tiny_model

from claimbench.engine.sampling_params import SamplingParams


@pytest.mark.slow
@pytest.mark.parametrize("kv_dtype", ["auto", "int8"])
def test_pallas_engine_greedy_tokens_match_xla(kv_dtype):
    rng = np.random.default_rng(0)
    # 40 tokens overflow the 32-token step budget: a prefill chunk, then a mixed chunk.
    prompts = [rng.integers(3, 97, size=n).tolist() for n in (40, 9, 3)]
    greedy = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (4, 6, 5)]
    model = tiny_model()
    outputs = {
        backend: tiny_engine(model, attention_backend=backend, kv_dtype=kv_dtype).generate(
            prompts, greedy
        )
        for backend in ("xla", "pallas")
    }
    for xla, pallas in zip(outputs["xla"], outputs["pallas"], strict=True):
        assert len(pallas.token_ids) == len(xla.token_ids) > 0
        assert pallas.token_ids == xla.token_ids
