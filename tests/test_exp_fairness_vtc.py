import pandas as pd
import pytest
from tenant_exp_helpers import assert_claim_metrics_recorded, experiment, run_tiny, write_checkpoint

from claimbench.harness.tenant_runs import ServedRun

CLAIM = "fairness-vtc"


def test_window_throughput_counts_tokens_between_first_and_last_arrival():
    requests = pd.DataFrame(
        {"arrival_s": [1.0, 3.0], "token_times_s": [[0.5, 1.5, 2.0], [3.0, 3.5]]}
    )
    # Tokens at 1.5, 2.0 and 3.0 fall in [1, 3]: 3 tokens over 2 s.
    assert experiment(CLAIM).window_throughput(requests) == 1.5


def test_service_gap_uses_the_runs_own_bound():
    steps = pd.DataFrame(
        {
            "running_tokens": [40, 100],
            "input_tokens.a": [30, 30],
            "output_tokens.a": [0, 1],
            "backlogged.a": [True, True],
            "input_tokens.b": [0, 0],
            "output_tokens.b": [0, 0],
            "backlogged.b": [True, True],
        }
    )
    served = ServedRun(pd.DataFrame({"prompt_tokens": [30, 12]}), steps, 1.0, False)
    params = {"input_weight": 1.0, "output_weight": 2.0}
    result = experiment(CLAIM).service_gap(served, params)
    # gap: a got 30 + 2 = 32 more than b; bound 2 * max(1 * 30, 2 * 100) = 400.
    assert result == {"gap": 32.0, "bound": 400.0, "gap_over_bound": pytest.approx(0.08)}


def test_tiny_run_records_the_claim_metrics_each_trial(tmp_path):
    ctx = run_tiny(CLAIM, write_checkpoint(tmp_path / "ckpt"), load=3.0)
    assert_claim_metrics_recorded(ctx)
    steps = ctx.frames()["steps"]
    assert set(steps["mode"]) == {"fcfs", "vtc"}
    assert {"input_tokens.heavy", "output_tokens.light", "backlogged.heavy"} <= set(steps.columns)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    steps.to_parquet(run_dir / "steps.parquet")
    [(title, svg)] = experiment(CLAIM).figures([run_dir])
    assert "FCFS and VTC" in title and svg.startswith("<svg") and "heavy" in svg
    assert experiment(CLAIM).figures([]) == []
