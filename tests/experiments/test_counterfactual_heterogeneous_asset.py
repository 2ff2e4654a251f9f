"""heterogeneous-asset's counterfactual: co-location-off serves the together arm time-sliced too.

At tiny size on a shared CPU two identically sliced arms still differ by far more than the
claim's 15% (their good-request counts swing with the host's load), so this test checks the
switch itself: with it on, no step of either arm serves both tenants."""

import pytest
from tenant_exp_helpers import run_tiny, write_checkpoint
from test_exp_heterogeneous_asset import TINY, _tenants_per_step


@pytest.mark.slow
def test_co_location_off_slices_both_arms(tmp_path):
    ctx = run_tiny(
        "heterogeneous-asset",
        write_checkpoint(tmp_path / "ckpt"),
        trials=1,
        base=TINY,
        counterfactual="co-location-off",
    )
    steps = ctx.frames()["steps"]
    for mode in ("together", "sliced"):
        arm = steps[steps["mode"] == mode].reset_index(drop=True)
        served = _tenants_per_step(arm)
        assert served and all(len(tenants) <= 1 for tenants in served), mode
        assert set().union(*served) == {"prefill", "decode"}, mode
