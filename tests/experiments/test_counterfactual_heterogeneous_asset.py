"""heterogeneous-asset's counterfactual: co-location-off serves the together arm time-sliced
too, so both arms are the same policy and the goodput gain lands under its threshold (the
trials' mean: each arm's two ABBA-interleaved runs keep a drift in the host's speed off the
gain, but a busy host still moves single requests across their SLOs)."""

import pytest
from counterfactual_helpers import assert_mean_fails, metric_values
from tenant_exp_helpers import run_tiny, write_checkpoint
from test_exp_heterogeneous_asset import TINY, _tenants_per_step

CLAIM = "heterogeneous-asset"


@pytest.fixture(scope="module")
def sliced_twice(tmp_path_factory):
    return run_tiny(
        CLAIM,
        write_checkpoint(tmp_path_factory.mktemp("ckpt")),
        trials=3,
        base=TINY,
        # Twice TINY's episode: the gain's count of good requests moves less per request.
        episode_requests=24,
        counterfactual="co-location-off",
    )


@pytest.mark.slow
def test_co_location_off_slices_both_arms(sliced_twice):
    steps = sliced_twice.frames()["steps"]
    for mode in ("together", "sliced"):
        arm = steps[(steps["mode"] == mode) & (steps["rep"] == 0) & (steps["trial"] == 0)]
        served = _tenants_per_step(arm.reset_index(drop=True))
        assert served and all(len(tenants) <= 1 for tenants in served), mode
        assert set().union(*served) == {"prefill", "decode"}, mode


@pytest.mark.slow
def test_co_location_off_gains_less_than_the_threshold(sliced_twice):
    frame = sliced_twice.measurements_frame("run")
    assert_mean_fails(CLAIM, "goodput_gain_pct", metric_values(frame, "goodput_gain_pct"))
