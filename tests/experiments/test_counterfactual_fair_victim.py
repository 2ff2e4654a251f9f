"""fair-victim's counterfactual: with the victim chosen by ``newest`` in the fair-share arm
too (blind to tenants' shares and tiers), both measured conditions cross their thresholds."""

import pytest
from counterfactual_helpers import assert_fails, metric_values
from tenant_exp_helpers import run_tiny, write_checkpoint

CLAIM = "fair-victim"
# A pool a third of a full batch, overloaded: newest preempts, the top tier among its victims.
EPISODE = {
    "prompt_len": [4, 8],
    "output_len": [8, 16],
    "kv_fraction": 0.34,
    "load": 1.5,
    "episode_requests": 24,
}


@pytest.mark.slow
def test_fair_share_off_saves_no_recompute_and_preempts_the_top_tier(tmp_path):
    ctx = run_tiny(
        CLAIM,
        write_checkpoint(tmp_path / "ckpt"),
        trials=1,
        counterfactual="fair-share-off",
        **EPISODE,
    )
    frame = ctx.measurements_frame("run")
    reduction = metric_values(frame, "recompute_reduction_pct")
    assert_fails(CLAIM, "recompute_reduction_pct", reduction)
    assert_fails(CLAIM, "top_tier_preemptions", metric_values(frame, "top_tier_preemptions"))
