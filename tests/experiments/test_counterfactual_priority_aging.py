"""priority-aging's counterfactuals: each measured condition crosses its threshold once the
mechanism it rests on is switched off, at tiny size.

The runs put the engine on a device whose every step takes DEVICE_STEP_S (the experiment's
device_step_s): on the real CPU a tiny step is mostly host work, and a busy host's jitter
moved one arm's waits against another's (tiers-off's high_p99_ratio read 0.91 once under the
full suite, against 1.6 or so from the queues' growth rates); with the step fixed and dwarfing
the host's work, which request waits how long follows from step counts."""

import pytest
from counterfactual_helpers import assert_fails, assert_mean_fails, metric_values
from tenant_exp_helpers import run_tiny, write_checkpoint

CLAIM = "priority-aging"
# A high tier overloaded on its own for the whole episode: strict priority starves the low
# tier for all of it, far past one aging horizon.
EPISODE = {"aging_requests": 2, "window_requests": 32, "high_load": 1.5, "low_load": 0.3}
DEVICE_STEP_S = 0.03  # well above a tiny step's host work on a shared CPU (a few ms)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt"))


@pytest.mark.slow
def test_aging_off_starves_the_low_tier_past_the_bound(checkpoint):
    ctx = run_tiny(
        CLAIM,
        checkpoint,
        trials=2,
        counterfactual="aging-off",
        device_step_s=DEVICE_STEP_S,
        **EPISODE,
    )
    frame = ctx.measurements_frame("run")
    low_wait = metric_values(frame, "low_wait_over_bound")
    assert_mean_fails(CLAIM, "low_wait_over_bound", low_wait)
    # Strict against strict: the starvation ratio has nothing left to show.
    assert_fails(CLAIM, "strict_low_wait_ratio", metric_values(frame, "strict_low_wait_ratio"))


@pytest.mark.slow
def test_tiers_off_puts_the_high_tier_behind_the_low_tiers_work(checkpoint):
    ctx = run_tiny(
        CLAIM,
        checkpoint,
        trials=1,
        counterfactual="tiers-off",
        device_step_s=DEVICE_STEP_S,
        **EPISODE,
    )
    frame = ctx.measurements_frame("run")
    assert_fails(CLAIM, "high_p99_ratio", metric_values(frame, "high_p99_ratio"))
