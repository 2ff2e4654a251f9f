import pandas as pd
import pytest
from tenant_exp_helpers import assert_claim_metrics_recorded, experiment, run_tiny, write_checkpoint

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


def test_tiny_run_records_the_claim_metric_each_trial(tmp_path):
    ctx = run_tiny(CLAIM, write_checkpoint(tmp_path / "ckpt"), num_small_tenants=3)
    assert_claim_metrics_recorded(ctx)
    requests = ctx.frames()["requests"]
    assert set(requests["tenant"]) <= {"big", "small0", "small1", "small2"}
    assert set(requests["trial"]) == {0, 1}
