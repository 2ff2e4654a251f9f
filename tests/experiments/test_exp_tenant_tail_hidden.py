import pandas as pd
import pytest
from engine_helpers import shared_tiny_engine
from tenant_exp_helpers import TINY_ENGINE_PARAMS, experiment, run_tiny, write_checkpoint

from claimbench.lab.load import tenant_runs as tr
from claimbench.lab.load.step_driver import serve_by_step
from claimbench.workload.build import WorkloadRequest

CLAIM = "tenant-tail-hidden"


def test_hidden_tail_by_hand():
    # big: ttft 1..98 s; small0: 2 s; small1: 99 and 100 s (one waiting at the end, censored).
    ttft = [*range(1, 99), 2, 99]
    frame = pd.DataFrame(
        {
            "tenant": ["big"] * 98 + ["small0", "small1"] + ["small1"],
            "arrival_s": [0.0] * 101,
            "first_token_s": [float(t) for t in ttft] + [float("nan")],
            "finish_s": [200.0] * 100 + [100.0],
            "finish_reason": ["length"] * 100 + ["timeout"],
        }
    )
    result = experiment(CLAIM).hidden_tail(frame)
    pooled = pd.Series([*ttft, 100.0]).quantile(0.99)
    assert result["pooled_p99_ttft_s"] == pytest.approx(pooled)
    assert result["worst_small_p99_ttft_s"] == pytest.approx(99.99)
    assert result["worst_tenant_p99_ttft_over_pooled"] == pytest.approx(99.99 / pooled)


def test_mix_makes_the_small_tenants_bursty_and_the_big_one_poisson():
    spec = experiment(CLAIM).mix(experiment(CLAIM).DEFAULT_PARAMS | {"num_small_tenants": 3}, 0)
    big, *small = spec.tenants
    assert (big.tenant, big.arrival, big.rate) == ("big", "poisson", 0.7)
    assert [(t.arrival, t.burstiness) for t in small] == [("gamma", 0.25)] * 3
    assert sum(t.rate for t in small) == pytest.approx(0.3)


# -- the mechanism, in steps ---------------------------------------------------------------


HORIZON, PERIOD, CLUMP = 1920, 960, 6


def stepped_ttft(clumped: bool) -> pd.DataFrame:
    """FCFS on a fixed-step clock, TTFT in steps (the step that yields the token counts).

    The big tenant sends one request every other step (the engine serves about one per
    step: a steady stream that meets no queue); two small tenants send CLUMP requests per
    PERIOD steps each, "steady" spread over the period and "clumpy" all in one step (spread
    like "steady" unless ``clumped``). The clumps' requests are under 1% of the pool."""
    arrivals = [(step, "big") for step in range(0, HORIZON, 2)]
    gap = PERIOD // CLUMP
    for start in range(0, HORIZON, PERIOD):
        for k in range(CLUMP):
            arrivals.append((start + 3 + gap * k, "steady"))
            arrivals.append((start + 5 + (0 if clumped else 2 + gap * k), "clumpy"))
    items = [
        (step, WorkloadRequest(0.0, tenant, 0, tuple(range(3, 11)), 8, i))
        for i, (step, tenant) in enumerate(sorted(arrivals))
    ]
    # Synchronous: a token counts in the step that computes it (async scheduling reports it
    # one step later).
    run = serve_by_step(shared_tiny_engine(async_scheduling=False), items, max_steps=5000)
    frame = run.requests.rename(columns={"arrival_step": "arrival_s"})
    return frame.assign(
        first_token_s=frame["first_token_step"] + 1.0, finish_s=frame["finish_step"] + 1.0
    )


@pytest.mark.slow
def test_a_clumped_small_tenant_has_the_tail_the_pooled_p99_hides():
    exp = experiment(CLAIM)
    clumped, spread = stepped_ttft(clumped=True), stepped_ttft(clumped=False)
    # Spread out, the small tenants are served like the big one: nothing to hide.
    assert exp.hidden_tail(spread)["worst_tenant_p99_ttft_over_pooled"] < 1.2
    # Clumped, a clump's last request waits behind the five before it, while the big
    # tenant's requests (most of the pool) rarely meet a clump: the pooled p99 stays low.
    per_tenant = tr.tenant_percentiles(clumped, tr.observed_ttft_s(clumped), 99)
    assert per_tenant["clumpy"] >= 4 * per_tenant["steady"]
    result = exp.hidden_tail(clumped)
    assert result["worst_small_p99_ttft_s"] == per_tenant["clumpy"]
    assert result["worst_small_p99_ttft_s"] > 1.5 * result["pooled_p99_ttft_s"]


# -- the experiment at a tiny size -----------------------------------------------------------


@pytest.mark.slow
def test_tiny_run_records_the_ratio_and_its_parts_each_trial(tmp_path):
    lengths = {
        f"{c}_{kind}": TINY_ENGINE_PARAMS[kind]
        for c in ("big", "small")
        for kind in ("prompt_len", "output_len")
    }
    params = lengths | {"num_small_tenants": 3, "episode_requests": 32}
    ctx = run_tiny(CLAIM, write_checkpoint(tmp_path / "ckpt"), **params)
    requests = ctx.frames()["requests"]
    assert set(requests["tenant"]) <= {"big", "small0", "small1", "small2"}
    assert set(requests["trial"]) == {0, 1}
    frame = ctx.measurements_frame("run")
    by_metric = frame.pivot(index="trial", columns="metric", values="value")
    ratio = by_metric["worst_small_p99_ttft_s"] / by_metric["pooled_p99_ttft_s"]
    assert by_metric["worst_tenant_p99_ttft_over_pooled"].tolist() == pytest.approx(ratio.tolist())
