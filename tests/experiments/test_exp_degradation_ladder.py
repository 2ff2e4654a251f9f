import numpy as np
import pandas as pd
import pytest
from tenant_exp_helpers import (
    TINY_ENGINE_PARAMS,
    arm_requests,
    assert_claim_metrics_recorded,
    assert_realised_loads,
    experiment,
    modes_in_order,
    run_tiny,
    trial_labels,
    write_checkpoint,
)

CLAIM = "degradation-ladder"
CAP = 2
# Thresholds for the tiny engine's 4 sequences; the standard tier capped well below its
# outputs (4..8 tokens), so a capped request shows.
LADDER = [
    {"action": "shed_tier_at_ingress", "tier": 2, "signal": "waiting_requests",
     "engage": 1, "release": 0},
    {"action": "cap_max_tokens", "tier": 1, "max_tokens": CAP, "signal": "waiting_requests",
     "engage": 2, "release": 0},
]  # fmt: skip


def test_slo_attainment_counts_completed_requests_within_both_objectives():
    frame = pd.DataFrame(
        {
            "tenant": ["premium"] * 4 + ["standard"] * 2,
            "completed": [True, True, True, False, True, True],
            "ttft_s": [0.5, 1.5, 0.9, np.nan, 0.1, 0.1],
            "tpot_s": [0.1, 0.1, np.nan, np.nan, 0.3, 0.1],
        }
    )
    slos = {"premium": (1.0, 0.2), "standard": (1.0, 0.2), "best_effort": (1.0, 0.2)}
    got = experiment(CLAIM).slo_attainment_pct(frame, slos)
    # premium: within; TTFT over; one token (no TPOT) within; never completed (shed) misses.
    assert got["premium"] == 50.0
    assert got["standard"] == 50.0  # TPOT over for one of two
    assert np.isnan(got["best_effort"])


def test_tiers_param_is_checked():
    check = experiment(CLAIM).check_tiers
    tiers = experiment(CLAIM).DEFAULT_PARAMS["tiers"]
    assert check(tiers) is tiers
    with pytest.raises(ValueError, match="one of them 'premium'"):
        check({"gold": tiers["premium"]})
    with pytest.raises(ValueError, match="tiers.standard.share must be > 0"):
        check(tiers | {"standard": tiers["standard"] | {"share": 0}})
    with pytest.raises(ValueError, match="tiers.premium needs exactly"):
        check(tiers | {"premium": {"tier": 0}})


@pytest.mark.slow
def test_tiny_run_serves_the_same_requests_with_the_ladder_and_without(tmp_path):
    ctx = run_tiny(
        CLAIM,
        write_checkpoint(tmp_path / "ckpt"),
        base=TINY_ENGINE_PARAMS,
        episode_requests=16,
        ladder=LADDER,
    )
    assert_claim_metrics_recorded(ctx)
    assert modes_in_order(ctx, 0) == ["ladder", "none", "control"]
    assert modes_in_order(ctx, 1) == ["none", "control", "ladder"]
    frame = ctx.measurements_frame("run")
    # The positive control fires: under the light load some tier meets its SLO.
    control = frame[frame["metric"] == "tiers_meeting_slo_without_control"]
    assert sorted(control["trial"]) == [0, 1] and (control["value"] >= 1).any()
    # Every trial's realised load is recorded against the nominal 2x, flagged where off it.
    assert_realised_loads(ctx, experiment(CLAIM).DEFAULT_PARAMS["overload"])
    premium = trial_labels(ctx, "premium_slo_attainment_pct")
    without = trial_labels(ctx, "tiers_meeting_slo_without")
    steps = ctx.frames()["steps"]
    for trial in range(2):
        ladder, none = (arm_requests(ctx, trial, mode) for mode in ("ladder", "none"))
        assert list(ladder["prompt_tokens"]) == list(none["prompt_tokens"])
        assert list(ladder["tenant"]) == list(none["tenant"])
        # Without a ladder nothing is shed or capped and every step is on rung 0.
        assert (none["finish_reason"] == "length").all()
        arm_steps = {
            m: steps[(steps["trial"] == trial) & (steps["mode"] == m)] for m in ("ladder", "none")
        }
        assert (arm_steps["none"]["ladder_rung"] == 0).all()
        # At 2x load the ladder engaged (the queue outgrew one request) and stepped down
        # again (at the latest once arrivals stopped and the queue drained; a request that
        # starts as it empties runs at least one more step, in which the ladder descends).
        rungs = arm_steps["ladder"]["ladder_rung"].to_numpy()
        assert rungs.max() >= 1 and (np.diff(rungs) < 0).any()
        assert premium[trial]["steps_per_rung"][0] < len(rungs)
        # Only best effort is shed; premium's answers are never cut.
        shed = ladder[ladder["finish_reason"] == "rejected"]
        assert len(shed) == premium[trial]["num_shed"] > 0
        assert set(shed["tenant"]) == {"best_effort"}
        is_premium = ladder["tenant"] == "premium"
        assert list(ladder.loc[is_premium, "output_tokens"]) == list(
            none.loc[is_premium, "output_tokens"]
        )
        # A standard answer is either whole or cut to the cap.
        standard = ladder["tenant"] == "standard"
        cut = ladder.loc[standard, "output_tokens"] != none.loc[standard, "output_tokens"]
        assert (ladder.loc[standard, "output_tokens"][cut] == CAP).all()
        # The recorded metric is the premium tier's attainment in the ladder arm.
        assert premium[trial]["attainment_ladder_pct"]["premium"] == pytest.approx(
            ctx.measurements_frame("run")
            .query("metric == 'premium_slo_attainment_pct' and trial == @trial")["value"]
            .item()
        )
        # The counts behind it: premium requests within their SLO out of premium requests.
        counts = frame[frame["trial"] == trial].set_index("metric")["value"]
        within = counts["premium_slo_attainment_pct_successes"]
        total = counts["premium_slo_attainment_pct_total"]
        assert total == is_premium.sum() > 0
        assert 100 * within / total == pytest.approx(counts["premium_slo_attainment_pct"])
        # Without: the tiers whose attainment reached their target, and only those.
        tiers = experiment(CLAIM).DEFAULT_PARAMS["tiers"]
        attained = without[trial]["attainment_none_pct"]
        assert without[trial]["tiers_meeting"] == [
            name for name, spec in tiers.items() if attained[name] >= spec["attainment_pct"]
        ]
