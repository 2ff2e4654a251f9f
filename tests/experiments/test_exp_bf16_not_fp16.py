"""bf16-not-fp16 at tiny size: both metrics every trial, agreements against the float32
reference, and one engine alive at a time."""

from __future__ import annotations

import json

import pytest
from engine_tracking import builds_with_alive
from precision_helpers import assert_claim_metrics_recorded, run_experiment, write_tiny_model

PARAMS = {
    "num_windows": 2,
    "window_len": 32,
    "decode_batch": 2,
    "decode_prompt_len": 8,
    "decode_tokens": 4,
    "engine": {"kv_pool_bytes": 2**20, "max_num_batched_tokens": 64},
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def frame(model_dir):
    return run_experiment("bf16-not-fp16", PARAMS, model_dir)


@pytest.mark.slow
def test_records_every_claim_metric_per_trial(frame):
    values = assert_claim_metrics_recorded("bf16-not-fp16", frame)
    assert len(values["fp16_speedup"]) == 2
    agree = frame[frame["metric"] == "top1_vs_f32_pct"]
    assert set(agree["labels"].map(lambda lb: json.loads(lb)["setting"])) == {"bf16", "fp16"}
    assert agree["value"].between(50, 100).all()
    for trial in (0, 1):
        rows = agree[agree["trial"] == trial]
        by = {
            json.loads(lb)["setting"]: v
            for lb, v in zip(rows["labels"], rows["value"], strict=True)
        }
        diff = values["fp16_minus_bf16_top1_pts"][trial]
        assert diff == pytest.approx(by["fp16"] - by["bf16"])


@pytest.mark.slow
def test_the_reference_and_the_two_engines_compute_in_their_own_dtypes(frame):
    for trial in (0, 1):
        rows = frame[(frame["trial"] == trial) & (frame["metric"] == "perplexity")]
        ppl = {
            json.loads(lb)["setting"]: v
            for lb, v in zip(rows["labels"], rows["value"], strict=True)
        }
        # The same windows through f32, bf16 and fp16 arithmetic: three different results.
        assert len({ppl["f32"], ppl["bf16"], ppl["fp16"]}) == 3
        speeds = frame[(frame["trial"] == trial) & (frame["metric"] == "decode_tokens_per_s")]
        assert len(speeds) == 2 and (speeds["value"] > 0).all()


def test_unknown_param_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="decode_token"):
        run_experiment("bf16-not-fp16", {**PARAMS, "decode_token": 4}, tmp_path)


@pytest.mark.slow
def test_decode_prompts_must_come_from_the_windows(tmp_path):
    with pytest.raises(ValueError, match="decode_batch"):
        run_experiment("bf16-not-fp16", {**PARAMS, "decode_batch": 3}, tmp_path)


@pytest.mark.slow
def test_never_holds_two_engines(model_dir, monkeypatch):
    """Each engine is freed before the next is built, only the bf16 and fp16 engines are
    built (float32 is the layer-by-layer reference), and they take turns within each trial:
    bf16, fp16 in trial 0; fp16 (kept), then bf16 again in trial 1."""
    built = builds_with_alive("bf16-not-fp16", PARAMS, model_dir, monkeypatch)
    assert [(options["dtype"], alive) for options, alive in built] == [
        ("bfloat16", 0),
        ("float16", 0),
        ("bfloat16", 0),
    ]
