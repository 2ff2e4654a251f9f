"""admission-at-ingress's counterfactuals: the ingress limits switched off in the bounded arm,
and on in the unbounded one, move each measured condition past its threshold."""

import pytest
from counterfactual_helpers import assert_fails, metric_values
from tenant_exp_helpers import TINY_ENGINE_PARAMS, run_tiny, write_checkpoint

CLAIM = "admission-at-ingress"
PARAMS = {
    "num_tenants": 2,
    "base_load": 0.5,
    "overload": 8.0,
    "queue_batches": 0.5,
    "episode_requests": 24,
    "recovery_requests": 8,
    "saturation_requests": 12,
    "prompt_len": [4, 12],
    "output_len": [4, 8],
    # Every step 10 ms on a fixed-step device: the tails are the queue's, not the host's
    # (limits off reads 48-52 against <= 3 there; on the real device, 1 ms steps on a busy
    # host once read 2.9).
    "device_step_s": 0.01,
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt"))


@pytest.mark.slow
def test_limits_off_lets_the_admitted_tail_grow(checkpoint):
    ctx = run_tiny(
        CLAIM, checkpoint, trials=1, base=TINY_ENGINE_PARAMS, counterfactual="limits-off", **PARAMS
    )
    frame = ctx.measurements_frame("run")
    assert_fails(CLAIM, "admitted_p99_ttft_ratio", metric_values(frame, "admitted_p99_ttft_ratio"))


@pytest.mark.slow
def test_limits_everywhere_keeps_the_unbounded_tail_short(checkpoint):
    ctx = run_tiny(
        CLAIM,
        checkpoint,
        trials=1,
        base=TINY_ENGINE_PARAMS,
        counterfactual="limits-everywhere",
        **PARAMS,
    )
    frame = ctx.measurements_frame("run")
    metric = "unbounded_p99_ttft_ratio"
    assert_fails(CLAIM, metric, metric_values(frame, metric))
