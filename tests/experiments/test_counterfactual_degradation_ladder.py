"""degradation-ladder: each measured condition, with its mechanism switched off, lands on the
other side of its threshold (the real experiment at tiny size, one thing changed)."""

from __future__ import annotations

import pandas as pd
import pytest
from counterfactual_helpers import assert_fails, assert_mean_fails, metric_values
from tenant_exp_helpers import TINY_ENGINE_PARAMS, experiment, run_tiny, write_checkpoint

CLAIM = "degradation-ladder"
# Thresholds for the tiny engine's 4 sequences (as the experiment's own tiny test).
LADDER = [
    {"action": "shed_tier_at_ingress", "tier": 2, "signal": "waiting_requests",
     "engage": 1, "release": 0},
    {"action": "cap_max_tokens", "tier": 1, "max_tokens": 2, "signal": "waiting_requests",
     "engage": 2, "release": 0},
]  # fmt: skip
# 48 request times at 2x: the loosest objective (4 batches of 4 = 16 request times) is a
# third of the episode, so without a ladder the queue outgrows every tier's objective.
EPISODE = 48


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "ckpt")


def frame_of(checkpoint, counterfactual: str, **params):
    ctx = run_tiny(
        CLAIM,
        checkpoint,
        base=TINY_ENGINE_PARAMS,
        episode_requests=EPISODE,
        ladder=LADDER,
        counterfactual=counterfactual,
        **params,
    )
    return ctx.measurements_frame("run")


def test_late_wait_is_the_median_ttft_of_the_last_quarter_over_the_objective():
    requests = pd.DataFrame(
        {
            "arrival_s": [float(t) for t in range(10, 18)],
            # The last quarter arrived at 16 and 17 s: TTFTs 2 and 4, median 3.
            "ttft_s": [0.1, 0.2, 0.1, 0.3, 0.1, 0.2, 2.0, 4.0],
        }
    )
    assert experiment(CLAIM).late_wait_over_slo(requests, 1.5) == pytest.approx(2.0)
    shed = requests.assign(ttft_s=[0.1] * 6 + [float("nan"), 3.0])  # one never started
    assert experiment(CLAIM).late_wait_over_slo(shed, 1.5) == pytest.approx(2.0)


@pytest.mark.slow
def test_without_the_ladder_the_premium_tier_misses_its_slo(checkpoint):
    frame = frame_of(checkpoint, "ladder-off")
    assert_fails(
        CLAIM, "premium_slo_attainment_pct", metric_values(frame, "premium_slo_attainment_pct")
    )
    # The manipulation check: by the episode's end a request waits several times longer at
    # 2x than under the control's light load.
    late = metric_values(frame, "late_wait_over_loosest_slo")
    light = metric_values(frame, "late_wait_over_loosest_slo_control")
    assert all(over > 2 * under for over, under in zip(late, light, strict=True)), (late, light)
    assert all(v > 0 for v in metric_values(frame, "num_premium_requests"))


@pytest.mark.slow
def test_without_overload_a_tier_meets_its_slo_with_no_ladder(checkpoint):
    # At a quarter of the service rate: queues stay short even on a busy shared host.
    frame = frame_of(checkpoint, "overload-off", control_load=0.25)
    values = metric_values(frame, "tiers_meeting_slo_without")
    assert_mean_fails(CLAIM, "tiers_meeting_slo_without", values)
