"""The host-starvation experiment: its arithmetic on fixed numbers, then a tiny run."""

from __future__ import annotations

import numpy as np
import pytest
from tenant_exp_helpers import assert_claim_metrics_recorded, experiment, run_tiny, write_checkpoint

CLAIM = "host-starvation"
TINY = {
    "engine": {
        "dtype": "float32",
        "page_size": 8,
        "max_num_batched_tokens": 32,
        "max_model_len": 128,
    },
    "batch": 4,
    "prompt_len": 6,
    "output_len": 8,
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "model")


def test_shares_and_throughput_come_from_the_step_periods():
    arm = experiment(CLAIM).ArmResult(
        periods_s=np.array([0.010, 0.012, 0.010, 0.008]),
        blocked_s=np.array([0.008, 0.009, 0.008, 0.007]),
        detok_s=0.0,
        wall_s=1.0,
        token_ids=[],
    )
    # The host waited 32 of 40 ms: it worked (the device idled) the other 20%.
    assert arm.host_share_pct() == pytest.approx(20.0)
    assert arm.blocked_share_pct() == pytest.approx(80.0)
    assert arm.tokens_per_s(64) == pytest.approx(64 * 4 / 0.040)


@pytest.mark.slow
def test_tiny_run_alternates_the_arms_over_the_same_full_batch_decode(checkpoint):
    ctx = run_tiny(CLAIM, checkpoint, trials=2, base=TINY)
    frame = assert_claim_metrics_recorded(ctx)
    # 24 prompt tokens prefill in one step (the first tokens); then 7 decode steps run the
    # whole batch, of which 6 have a successor step to end their period. Async scheduling
    # leaves length finishes out of the next step, so it runs no extra step.
    steps = frame[frame["metric"] == "decode_steps"]
    assert len(steps) == 4 and (steps["value"] == 6).all()
    assert (frame.loc[frame["metric"] == "arms_outputs_match", "value"] == 1.0).all()
    saved = ctx.frames()["steps"]
    assert saved["num_preempted"].sum() == 0  # the pool holds every request at full length
    order = [list(dict.fromkeys(saved.loc[saved["trial"] == t, "mode"])) for t in (0, 1)]
    assert order == [["off", "on"], ["on", "off"]]
    # Each arm really ran in its mode: the on-arm read every step one call late.
    by_mode = saved.groupby("mode")["overlapped"]
    assert by_mode.all()["on"] and not by_mode.any()["off"]
    # Every token was detokenized as it arrived (the checkpoint has a tokenizer).
    assert (frame.loc[frame["metric"] == "detok_share_pct", "value"] > 0).all()
    share = frame.loc[frame["metric"] == "host_share_pct", "value"]
    assert share.between(0, 100).all()


@pytest.mark.slow
def test_params_are_checked(checkpoint):
    with pytest.raises(ValueError, match="output_len must be >= 3"):
        run_tiny(CLAIM, checkpoint, trials=1, base=TINY, output_len=2)
    with pytest.raises(ValueError, match="exceeds max_model_len=128"):
        run_tiny(CLAIM, checkpoint, trials=1, base=TINY, prompt_len=100, output_len=40)
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        run_tiny(CLAIM, checkpoint, trials=1, base=TINY, batch=0)
