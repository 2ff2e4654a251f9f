import dataclasses

import pandas as pd
import pytest
from engine_helpers import tiny_engine
from tenant_exp_helpers import assert_realised_loads, experiment, run_tiny, write_checkpoint

from claimbench.engine.outputs import TokenEvent
from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.load import tenant_runs as tr

CLAIM = "priority-aging"


# -- the mechanism, in steps ---------------------------------------------------------------

AGING_STEPS = 10
NUM_HIGH = 40
LOW_AT = 4  # the low request arrives once the high tier has a queue


def first_token_steps(policy: str) -> pd.DataFrame:
    """A backlogged high tier (one request per step from step 0; the engine's two slots
    serve two per 8 steps) and one low-tier request at step LOW_AT, stepped to completion.

    Arrival times are step indices, so aging's horizon is AGING_STEPS steps and the schedule
    is the same on any host (serve_by_step stamps wall-clock arrivals, which aging reads)."""
    engine = tiny_engine(max_num_seqs=2)
    engine.reset(
        dataclasses.replace(engine.config, scheduling_policy=policy, priority_aging_s=AGING_STEPS)
    )
    arrivals = sorted([(LOW_AT, "low", 1)] + [(step, "high", 0) for step in range(NUM_HIGH)])
    sampling = SamplingParams(max_tokens=8, ignore_eos=True)
    rows, step = {}, 0
    while arrivals or engine.has_unfinished:
        while arrivals and arrivals[0][0] <= step:
            arrival, tenant, tier = arrivals.pop(0)
            rid = engine.add_request(list(range(3, 11)), sampling, tenant, tier, float(arrival))
            rows[rid] = {"tenant": tenant, "arrival": arrival, "first_token": None}
        for event in engine.step():
            if isinstance(event, TokenEvent) and event.index == 0:
                rows[event.request_id]["first_token"] = step
        step += 1
        assert step < 2000, "stalled"
    return pd.DataFrame(rows.values())


def test_strict_priority_starves_the_low_tier_behind_a_backlogged_high_tier():
    run = first_token_steps("priority")
    low = run.loc[run["tenant"] == "low", "first_token"].item()
    high = run[run["tenant"] == "high"]
    # It goes last, behind every high request, the 36 that arrived after it included.
    assert (high["first_token"] <= low).all()
    assert (high.loc[high["arrival"] > LOW_AT, "first_token"] < low).any()


def test_aging_lets_the_low_tier_pass_every_later_high_request():
    run = first_token_steps("priority-aging")
    low = run.loc[run["tenant"] == "low", "first_token"].item()
    high = run[run["tenant"] == "high"]
    # Deadline order: the low request (deadline 4 + 1 * 10 = 14) goes after the high ones
    # that arrived before step 14 and before every one that arrived at or after it.
    deadline = LOW_AT + AGING_STEPS
    assert (high.loc[high["arrival"] < deadline, "first_token"] <= low).all()
    assert (high.loc[high["arrival"] >= deadline, "first_token"] >= low).all()
    # Its wait is bounded by the horizon plus the wait of a high request arriving then.
    at_horizon = high.loc[high["arrival"] == deadline].iloc[0]
    assert low - LOW_AT <= AGING_STEPS + (at_horizon["first_token"] - at_horizon["arrival"])
    strict = first_token_steps("priority")
    strict_low = strict.loc[strict["tenant"] == "low", "first_token"].item()
    assert strict_low - LOW_AT > 2 * (low - LOW_AT)


# -- the metrics ---------------------------------------------------------------------------


def frame(tenants, arrivals, first_scheduled, first_token):
    n = len(tenants)
    return pd.DataFrame(
        {
            "tenant": tenants,
            "arrival_s": arrivals,
            "first_scheduled_s": first_scheduled,
            "first_token_s": first_token,
            "finish_s": [100.0] * n,
            "finish_reason": ["length"] * n,
        }
    )


def test_aging_metrics_by_hand():
    exp = experiment(CLAIM)
    alone = exp.tier_outcome(frame(["high"] * 2, [0.0, 1.0], [0.5, 1.2], [1.0, 1.5]))
    aging = exp.tier_outcome(
        frame(["high", "high", "low"], [0.0, 1.0, 0.0], [0.5, 1.6, 2.0], [1.0, 2.0, 2.5])
    )
    strict = exp.tier_outcome(
        frame(["high", "high", "low"], [0.0, 1.0, 0.0], [0.5, 1.2, 12.0], [1.0, 1.5, 12.5])
    )
    assert alone["high_worst_wait_s"] == pytest.approx(0.5)  # 0.5 - 0 and 1.2 - 1
    assert alone["low_worst_wait_s"] != alone["low_worst_wait_s"]  # NaN: no low tier
    metrics = exp.aging_metrics({"high-alone": alone, "aging": aging, "strict": strict}, 1.0)
    # bound = 1 tier * 1 s + 0.5 s; low waited 2 s under aging, 12 s under strict.
    assert metrics["bound_s"] == pytest.approx(1.5)
    assert metrics["low_wait_over_bound"] == pytest.approx(2.0 / 1.5)
    assert metrics["strict_low_wait_ratio"] == pytest.approx(6.0)
    # High p99 TTFT: alone TTFTs 1.0, 0.5 -> 0.995; aging 1.0, 1.0 -> 1.0.
    assert metrics["high_p99_ratio"] == pytest.approx(1.0 / 0.995)


# -- the experiment at a tiny size -----------------------------------------------------------


@pytest.mark.slow
def test_tiny_run_serves_the_same_episode_in_each_arm(tmp_path):
    params = {
        "aging_requests": 4,
        "window_requests": 24,
    }
    ctx = run_tiny(CLAIM, write_checkpoint(tmp_path / "ckpt"), **params)
    requests = ctx.frames()["requests"]
    assert set(requests["mode"]) == {"high-alone", "strict", "aging"}
    for _, trial in requests.groupby("trial"):
        by_mode = {m: g for m, g in trial.groupby("mode")}
        assert set(by_mode["high-alone"]["tenant"]) == {"high"}
        assert (
            by_mode["strict"]["tenant"]
            .value_counts()
            .equals(by_mode["aging"]["tenant"].value_counts())
        )
        assert len(by_mode["high-alone"]) == (by_mode["aging"]["tenant"] == "high").sum()
    measured = ctx.measurements_frame("run")
    bounds = measured.loc[measured["metric"] == "low_wait_over_bound"]
    assert sorted(bounds["trial"]) == [0, 1]
    # The manipulation check and the realised load, every trial: the high tier above the
    # service rate kept a queue through most of the strict arm's arrivals.
    check = measured.loc[measured["metric"] == "strict_high_backlogged_pct"]
    assert sorted(check["trial"]) == [0, 1] and check["value"].between(0, 100).all()
    defaults = experiment(CLAIM).DEFAULT_PARAMS
    assert_realised_loads(ctx, defaults["high_load"] + defaults["low_load"])
    assert (measured["value"] >= 0).all()


@pytest.mark.slow
def test_manipulation_check_reads_the_high_tiers_queue_during_arrivals():
    steps = pd.DataFrame({"start_s": [0.0, 1.0, 2.0, 3.0], "backlogged.high": [1, 1, 0, 1]})
    served = tr.ServedRun(pd.DataFrame(), steps, duration_s=4.0, timed_out=False)
    # Steps starting before 3 s: two of three had a high-tier request waiting.
    assert experiment(CLAIM).high_backlogged_pct(served, 3.0) == pytest.approx(200 / 3)
