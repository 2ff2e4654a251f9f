"""prefix-leak's counterfactuals: the cache shared in the salted mode, or switched off in either
mode, moves each measured condition past its threshold."""

import pytest
from counterfactual_helpers import assert_fails, metric_values
from test_exp_prefix_leak import TINY, _ctx, _experiment

CLAIM = "prefix-leak"
# More probes than the shape test needs, so an accuracy is not a coin's few flips.
PARAMS = TINY | {"num_secrets": 8, "num_calibration": 8, "num_probes": 16}


def run(counterfactual: str):
    ctx = _ctx(PARAMS | {"counterfactual": counterfactual}, trials=1)
    _experiment().run(ctx)
    return ctx.measurements_frame("run")


@pytest.mark.slow
def test_no_salt_lets_the_attack_read_the_salted_cache():
    frame = run("no-salt")
    assert_fails(CLAIM, "salted_attack_acc_pct", metric_values(frame, "salted_attack_acc_pct"))


@pytest.mark.slow
def test_shared_cache_off_leaves_the_attack_nothing_to_read():
    frame = run("shared-cache-off")
    assert_fails(CLAIM, "shared_attack_acc_pct", metric_values(frame, "shared_attack_acc_pct"))


@pytest.mark.slow
def test_salted_cache_off_keeps_none_of_the_victims_hits():
    frame = run("salted-cache-off")
    metric = "salted_own_hit_retention_pct"
    assert_fails(CLAIM, metric, metric_values(frame, metric))
