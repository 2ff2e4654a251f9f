"""heterogeneous-asset: time-slicing between tenants, goodput, and the experiment at a tiny size."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from engine_helpers import shared_tiny_engine
from tenant_exp_helpers import (
    arm_requests,
    assert_claim_metrics_recorded,
    experiment,
    modes_in_order,
    run_tiny,
    trial_labels,
    write_checkpoint,
)

from claimbench.engine.sched.fairness import INPUT_PREFIX, OUTPUT_PREFIX
from claimbench.lab.load import tenant_runs as tr
from claimbench.lab.load.time_slicing import serve_time_sliced, window_tenant
from claimbench.workload.build import WorkloadRequest

CLAIM = "heterogeneous-asset"


def _requests(max_tokens: int) -> list[WorkloadRequest]:
    """Three requests each of tenants a and b, all arriving at once, fixed prompts."""
    rng = np.random.default_rng(0)
    return [
        WorkloadRequest(0.0, tenant, 0, tuple(rng.integers(3, 97, 9).tolist()), max_tokens, i)
        for i, tenant in enumerate("ababab")
    ]


def _tenants_per_step(steps: pd.DataFrame) -> list[set[str]]:
    """The tenants each step served (their cumulative service grew in it)."""
    served = []
    cumulative = steps[[c for c in steps.columns if c.startswith((INPUT_PREFIX, OUTPUT_PREFIX))]]
    delta = cumulative.fillna(0).diff().fillna(cumulative.fillna(0))
    for _, row in delta.iterrows():
        served.append({c.split(".", 1)[1] for c, v in row.items() if v > 0})
    return served


def test_window_tenant_alternates_equal_windows():
    order = ("prefill", "decode")
    assert window_tenant(order, 0.5, 0.0) == (0, "prefill")
    assert window_tenant(order, 0.5, 0.49) == (0, "prefill")
    assert window_tenant(order, 0.5, 0.5) == (1, "decode")
    assert window_tenant(order, 0.5, 1.7) == (3, "decode")


@pytest.mark.slow
def test_slicing_keeps_tenants_apart_and_resumes_paused_requests():
    engine = shared_tiny_engine()
    window_s = 0.03
    sliced = serve_time_sliced(engine, _requests(100), ("a", "b"), window_s, timeout_s=60.0)
    assert not sliced.timed_out
    frame = sliced.requests
    # Every request got all its tokens, stitched across its pieces.
    assert len(frame) == 6 and (frame["output_tokens"] == 100).all() and frame["completed"].all()
    # No step served both tenants.
    assert all(len(tenants) <= 1 for tenants in _tenants_per_step(sliced.steps))
    # b arrived in a's window and waited for its own.
    b = frame[frame["tenant"] == "b"]
    assert (b["ttft_s"] >= window_s * 0.99).all()
    # 100 tokens take longer than one window: requests paused, and resumed from cached pages.
    assert (frame["num_pieces"] > 1).any()
    assert frame["resumed_prefix_hit_tokens"].sum() > 0
    # Co-located, the same requests share steps from the first one on.
    engine.reset()
    together = tr.serve(engine, _requests(100), timeout_s=60.0)
    assert _tenants_per_step(together.steps)[0] == {"a", "b"}


def test_good_requests_meet_both_objectives_of_their_tenant():
    requests = pd.DataFrame(
        {
            "tenant": ["prefill", "prefill", "decode", "decode", "decode"],
            "completed": [True, True, True, True, False],
            "ttft_s": [0.5, 1.5, 0.1, 0.1, 0.1],
            "tpot_s": [np.nan, 0.01, 0.02, 0.05, 0.01],
        }
    )
    slo = {"prefill": {"ttft": 1.0, "tpot": 0.1}, "decode": {"ttft": 0.2, "tpot": 0.03}}
    # Fast one-token answer; TTFT missed; within both; TPOT missed; not completed.
    assert experiment(CLAIM).good(requests, slo).tolist() == [True, False, True, False, False]


def test_slos_scale_each_tenants_isolated_latency():
    params = {"slo_scale": {"prefill": {"ttft": 2, "tpot": 3}, "decode": {"ttft": 4, "tpot": 5}}}
    isolated = {"prefill": {"ttft": 0.5, "tpot": 0.01}, "decode": {"ttft": 0.1, "tpot": 0.02}}
    assert experiment(CLAIM).slos(params, isolated) == {
        "prefill": {"ttft": 1.0, "tpot": 0.03},
        "decode": {"ttft": 0.4, "tpot": 0.1},
    }


TINY = {
    "engine": {
        "dtype": "float32",
        "page_size": 8,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 32,
        "max_model_len": 128,
    },
    "compile_cache": False,
    "prefill_prompt_len": [40, 60],
    "prefill_output_len": [2, 4],
    "decode_prompt_len": [4, 8],
    "decode_output_len": [16, 24],
    "episode_requests": 12,
    "saturation_requests": 12,
    "probe_requests": 2,
}


@pytest.mark.slow
def test_tiny_run_serves_the_same_requests_together_and_sliced(tmp_path):
    ctx = run_tiny(CLAIM, write_checkpoint(tmp_path / "ckpt"), trials=2, base=TINY)
    assert_claim_metrics_recorded(ctx)
    assert modes_in_order(ctx, 0) == ["together", "sliced"]
    assert modes_in_order(ctx, 1) == ["sliced", "together"]
    labels = trial_labels(ctx, "goodput_gain_pct")
    for trial in (0, 1):
        together, sliced = arm_requests(ctx, trial, "together"), arm_requests(ctx, trial, "sliced")
        # The same requests, each served to its full length in both arms.
        columns = ["tenant", "prompt_tokens", "output_tokens"]
        pd.testing.assert_frame_equal(
            together[columns].sort_values(columns).reset_index(drop=True),
            sliced[columns].sort_values(columns).reset_index(drop=True),
        )
        assert set(together["tenant"]) == {"prefill", "decode"}
        # Each arm served the requests twice (ABBA).
        assert 2 * labels[trial]["num_requests"] == len(together) and not labels[trial]["timed_out"]
        good = labels[trial]["good"]
        assert 0 <= good["sliced"] <= len(sliced) and 0 <= good["together"] <= len(together)
    assert labels[0]["saturation_tok_s"] != labels[1]["saturation_tok_s"]
    # The second trial was paced by the saturation the first measured after its arms.
    assert labels[1]["paced_tok_s"] == labels[0]["saturation_tok_s"]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ctx.frames()["requests"].to_parquet(run_dir / "requests.parquet")
    [(title, svg)] = experiment(CLAIM).figures([run_dir])
    assert "time-sliced" in title and svg.startswith("<svg")


@pytest.mark.parametrize("step_s", [-0.01, 10, "0.04", True])
def test_device_step_s_out_of_range_is_named(tmp_path, step_s):
    with pytest.raises(ValueError, match="device_step_s"):
        run_tiny(CLAIM, tmp_path / "ckpt", trials=1, base=TINY, device_step_s=step_s)
