import dataclasses

import pytest
from engine_helpers import tiny_engine
from tenant_exp_helpers import experiment, run_tiny, write_checkpoint

from claimbench.lab.load import tenant_runs as tr
from claimbench.workload.build import WorkloadRequest

CLAIM = "fair-victim"


def test_pool_pages_is_a_fraction_of_a_full_batch():
    params = {
        "engine": {"page_size": 8, "max_num_seqs": 4},
        "prompt_len": [4, 8],
        "output_len": [8, 16],
        "kv_fraction": 0.5,
    }
    # Longest request: 8 + 16 = 24 tokens = 3 pages; 4 of them = 12 pages; half = 6.
    assert experiment(CLAIM).pool_pages(params) == 6
    with pytest.raises(ValueError, match="leaves 1 pages, fewer than one 24-token request"):
        experiment(CLAIM).pool_pages(params | {"kv_fraction": 0.1})


def pressured_run(victim_policy, prefix_caching):
    """Six requests at once into 14 pages that hold about two and a half of them."""
    engine = tiny_engine(num_pages=14)
    engine.reset(
        dataclasses.replace(
            engine.config,
            victim_policy=victim_policy,
            scheduling_policy="priority",
            prefix_caching=prefix_caching,
        )
    )
    tenants = [("mid", 1), ("bulk", 1), ("bulk", 1), ("mid", 1), ("top", 0), ("top", 0)]
    requests = [
        WorkloadRequest(0.0, tenant, tier, tuple(range(3, 11 + i)), 40, i)
        for i, (tenant, tier) in enumerate(tenants)
    ]
    return engine, tr.serve(engine, requests, timeout_s=120.0)


@pytest.mark.slow
@pytest.mark.parametrize("victim_policy", ["newest", "fair-share"])
def test_recompute_is_the_work_preemptions_threw_away(victim_policy):
    # Without a prefix cache every lost token is computed again: the count from the
    # served input equals the tokens the scheduler's preemptions discarded.
    engine, served = pressured_run(victim_policy, "off")
    recomputed = experiment(CLAIM).recomputed_tokens(served)
    assert recomputed > 0
    assert recomputed == sum(engine.scheduler.service.preempted_tokens.values())
    # With the cache on, blocks still cached at readmission are not recomputed.
    engine, cached = pressured_run(victim_policy, "per-tenant")
    recomputed_cached = experiment(CLAIM).recomputed_tokens(cached)
    assert 0 <= recomputed_cached <= sum(engine.scheduler.service.preempted_tokens.values())


@pytest.mark.slow
def test_recompute_refuses_a_run_cut_short():
    _, served = pressured_run("newest", "off")
    cut = dataclasses.replace(served, timed_out=True)
    with pytest.raises(ValueError, match="served to completion"):
        experiment(CLAIM).recomputed_tokens(cut)


@pytest.mark.slow
def test_tiny_run_compares_the_victim_policies_on_the_same_requests(tmp_path):
    params = {
        "prompt_len": [4, 8],
        "output_len": [8, 16],
        "kv_fraction": 0.34,
        "load": 1.5,
        "episode_requests": 24,
    }
    ctx = run_tiny(CLAIM, write_checkpoint(tmp_path / "ckpt"), **params)
    requests = ctx.frames()["requests"]
    assert set(requests["mode"]) == {"newest", "fair-share"}
    for _, trial in requests.groupby("trial"):
        sizes = trial.groupby("mode")["prompt_tokens"].apply(sorted)
        assert sizes["newest"] == sizes["fair-share"]
    frame = ctx.measurements_frame("run")
    reduction = frame[frame["metric"] == "recompute_reduction_pct"]
    assert sorted(reduction["trial"]) == [0, 1]
    assert (reduction["value"] <= 100.0).all()
    # The condition and its positive control, per trial, each from its own arm's requests.
    for metric, mode in (
        ("top_tier_preemptions", "fair-share"),
        ("top_tier_preemptions_control", "newest"),
    ):
        rows = frame[frame["metric"] == metric].sort_values("trial")
        assert list(rows["trial"]) == [0, 1]
        arm = requests[requests["mode"] == mode]
        expected = [experiment(CLAIM).top_tier_preemptions(g) for _, g in arm.groupby("trial")]
        assert list(rows["value"]) == expected


@pytest.mark.slow
def test_positive_control_fires_where_the_top_tier_is_at_risk():
    # Top-tier requests arrive last into a pool the lower tiers overflow: newest, blind to
    # tiers, preempts them, so a zero under fair-share here would mean something.
    _, served = pressured_run("newest", "off")
    assert experiment(CLAIM).top_tier_preemptions(served.requests) > 0
