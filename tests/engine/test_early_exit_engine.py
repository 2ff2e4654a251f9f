"""Early exit in the engine: EngineConfig.early_exit_threshold, the exit layers per step."""

from __future__ import annotations

import pytest
from engine_helpers import shared_tiny_engine, tiny_engine, tiny_model

from claimbench.engine.config import EngineConfig
from claimbench.engine.sampling_params import SamplingParams
from claimbench.models.exit_heads import ExitHeads, save_exit_heads

PROMPTS = [[3, 4, 5, 6, 7], [10, 11, 12], [20, 21, 22, 23, 24, 25, 26]]
GREEDY = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)


def _serve(model_dir, threshold):
    engine = tiny_engine(model_path=model_dir, early_exit_threshold=threshold)
    outputs = engine.generate(PROMPTS, GREEDY)
    return [o.token_ids for o in outputs], engine.steps_frame()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("exits")
    save_exit_heads(ExitHeads(tiny_model(), (1,)), path, threshold=0.9)
    return path


@pytest.mark.slow
def test_never_exiting_serves_the_ordinary_tokens(model_dir) -> None:
    plain_engine = shared_tiny_engine()
    plain = plain_engine.generate(PROMPTS, GREEDY)
    assert all(len(x) == 0 for x in plain_engine.steps_frame().exit_layers)
    tokens, steps = _serve(model_dir, 1.5)
    assert tokens == [o.token_ids for o in plain]
    for row in steps.itertuples():
        assert list(row.exit_layers) == [2] * row.num_scheduled_tokens


@pytest.mark.slow
def test_threshold_zero_exits_decode_tokens_only(model_dir) -> None:
    _, steps = _serve(model_dir, 0.0)
    decode = steps[steps.num_prefill_seqs == 0]
    prefill = steps[steps.num_prefill_seqs > 0]
    assert len(decode) and len(prefill)
    assert all(set(layers) == {1} for layers in decode.exit_layers)
    assert all(set(layers) == {2} for layers in prefill.exit_layers)


@pytest.mark.slow
def test_bad_thresholds_are_refused() -> None:
    for bad in (-0.1, "0.5", True):
        with pytest.raises(ValueError, match="early_exit_threshold"):
            EngineConfig(early_exit_threshold=bad)
    with pytest.raises(ValueError, match="tp=1"):
        EngineConfig(early_exit_threshold=0.5, speculative="ngram")
