"""cold-start: fresh processes from launch to first token, at the smallest size."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from counterfactual_helpers import assert_holds, metric_values
from tenant_exp_helpers import assert_claim_metrics_recorded, experiment, run_tiny, write_checkpoint

from claimbench.lab.probes.cold_start_probe import bucket_first_steps

CLAIM = "cold-start"
# One bucket pair (16 tokens x 8 sequences): each process compiles one program.
TINY = {
    "engine": {
        "max_num_batched_tokens": 16,
        "max_num_seqs": 8,
        "max_model_len": 64,
        "page_size": 8,
    },
    "first_prompt_len": 8,
    "max_tokens": 4,
    "workload_prompt_lens": [4, 12],
    "timeout_s": 300,
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny")


def test_bucket_first_steps_separate_the_first_step_from_later_ones():
    steps = pd.DataFrame(
        {
            "token_bucket": [16, 16, 16, 32],
            "seq_bucket": [8, 8, 8, 8],
            "device_s": [2.0, 0.1, 0.3, 1.5],
        }
    )
    buckets = bucket_first_steps(steps)
    assert buckets == [
        {
            "token_bucket": 16,
            "seq_bucket": 8,
            "first_s": 2.0,
            "later_median_s": 0.2,
            "num_steps": 3,
        },
        {
            "token_bucket": 32,
            "seq_bucket": 8,
            "first_s": 1.5,
            "later_median_s": None,
            "num_steps": 1,
        },
    ]
    # Only a bucket seen again gives a compile time: its first step less its later median.
    assert experiment(CLAIM).bucket_compile_s(buckets) == {(16, 8): pytest.approx(1.8)}


@pytest.mark.slow
def test_fill_writes_the_persistent_cache_and_a_bad_spec_fails_loudly(checkpoint, tmp_path):
    exp = experiment(CLAIM)
    config = {"model_path": str(checkpoint), "dtype": "float32"} | TINY["engine"]
    prompts = {"first_prompt": [5, 6, 7, 8], "max_tokens": 2, "workload": [[9, 10]]}
    cache = tmp_path / "cache"
    cache.mkdir()
    seconds, report = exp.launch(exp.arm_spec(config, "fill", str(cache), prompts), 300)
    assert seconds > 0 and report["num_precompiled"] == 1
    assert report["compiles_during_serving"] == 0
    assert any(cache.iterdir())  # the compiled program was written to the cache
    with pytest.raises(RuntimeError, match="no_such_option"):
        exp.launch(exp.arm_spec(config | {"no_such_option": 1}, "cold", "", prompts), 300)


@pytest.mark.slow
def test_tiny_run_times_three_fresh_processes(checkpoint):
    ctx = run_tiny(CLAIM, checkpoint, trials=1, base=TINY)
    frame = assert_claim_metrics_recorded(ctx)
    labels = {
        (row.metric, json.loads(row.labels).get("arm")): row.value for row in frame.itertuples()
    }
    # Precompiled processes compile nothing while serving; the cold one compiled what it used,
    # and JAX's own events saw it: the positive control fires.
    assert labels[("compiles_during_serving", None)] == 0
    assert labels[("compiles_during_serving_control", "cold")] >= 1
    assert labels[("programs_compiled", "cold")] >= 1
    assert labels[("precompile_s", "cold")] == 0 and labels[("precompile_s", "precompile")] > 0
    for arm in ("cold", "precompile", "cached"):
        assert labels[("start_to_first_token_s", arm)] > 0
    assert labels[("warm_first_ttft_s", None)] > 0
    # The cold process's first request pays its bucket's compile, far more than ten warm steps
    # (the cold-precompiled counterfactual's test checks the other side on the same design).
    assert_holds(
        CLAIM, "cold_over_warm_first_ttft", metric_values(frame, "cold_over_warm_first_ttft")
    )


@pytest.mark.slow
def test_figure_reads_the_newest_runs_measurements(tmp_path):
    rows = [
        ("start_to_first_token_s", arm, v)
        for arm in ("cold", "precompile", "cached")
        for v in (2.0, 3.0)
    ]
    rows.append(("warm_first_ttft_s", None, 0.01))
    frame = pd.DataFrame(
        {
            "metric": [m for m, _, _ in rows],
            "labels": [json.dumps({} if arm is None else {"arm": arm}) for _, arm, _ in rows],
            "value": [v for _, _, v in rows],
        }
    )
    figures = experiment(CLAIM).figures
    assert figures([tmp_path]) == []
    frame.to_parquet(tmp_path / "measurements.parquet")
    [(title, svg)] = figures([tmp_path])
    assert "first token" in title and svg.startswith("<svg")
