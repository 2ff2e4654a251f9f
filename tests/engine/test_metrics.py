import numpy as np
import pandas as pd
import pytest
from engine_helpers import make_request

from claimbench.engine.metrics import StepRecord, requests_frame, steps_frame
from claimbench.lab.metrics.serving_summary import summarize, summarize_by_tenant


def served(tenant, arrival, token_times, reason="length", prompt=4):
    r = make_request(prompt, max_tokens=len(token_times), tenant=tenant, arrival=arrival)
    r.first_scheduled_time = arrival + 0.1
    for t in token_times:
        r.append_output(7, 0.0, t)
    r.finish_time = token_times[-1] if token_times else arrival
    r.finish_reason = reason
    return r


@pytest.fixture
def frame():
    # Times are offsets from t0 = 100.
    a = served("a", 100.0, [101.0, 101.5, 102.0])  # TTFT 1, E2EL 2, TPOT 0.5, ITL 0.5, 0.5
    b = served("b", 101.0, [101.5, 103.5])  # TTFT 0.5, E2EL 2.5, TPOT 2, ITL 2
    c = served("a", 102.0, [104.0])  # TTFT 2, E2EL 2, no TPOT
    rejected = make_request(4, tenant="b", arrival=102.5)
    rejected.finish_reason, rejected.rejected_reason = "rejected", "too long"
    return requests_frame([a, b, c, rejected], t0=100.0)


def test_requests_frame_columns(frame):
    assert frame["arrival_s"].tolist() == [0.0, 1.0, 2.0, 2.5]
    assert frame["ttft_s"].tolist()[:3] == [1.0, 0.5, 2.0]
    assert frame["tpot_s"].tolist()[:2] == [0.5, 2.0] and np.isnan(frame["tpot_s"][2])
    assert frame["completed"].tolist() == [True, True, True, False]
    assert frame["first_scheduled_s"][0] == pytest.approx(0.1)


def test_summary_uses_vllm_definitions(frame):
    steps = steps_frame(
        [
            StepRecord(i, 0.0, 1, 1, 0, 1, 1, 0, 16, 8, 15, 0, used, 10 - used, 0.001, 0.002)
            for i, used in enumerate([2, 7, 4])
        ]
    )
    s = summarize(frame, steps, slo_ttft_s=1.0, slo_tpot_s=1.0)
    assert s["num_completed"] == 3 and s["num_rejected"] == 1
    assert s["duration_s"] == 4.0  # first arrival 0 .. last finish 4
    assert s["request_throughput"] == 3 / 4
    assert s["output_throughput"] == 6 / 4
    assert s["total_token_throughput"] == 18 / 4
    assert s["mean_ttft_s"] == pytest.approx(3.5 / 3)
    assert s["p50_ttft_s"] == 1.0
    assert s["mean_tpot_s"] == 1.25  # c has one token, so no TPOT
    assert s["mean_itl_s"] == 1.0  # gaps 0.5, 0.5, 2.0 pooled
    assert s["p50_itl_s"] == 0.5
    assert s["mean_e2el_s"] == pytest.approx(6.5 / 3)
    assert s["p99_e2el_s"] == pytest.approx(np.percentile([2.0, 2.5, 2.0], 99))
    # Only a meets both SLOs: b's TPOT is 2, c's TTFT is 2.
    assert s["goodput"] == 1 / 4
    assert s["min_kv_headroom"] == pytest.approx(0.3)


def test_per_tenant_summaries_add_up(frame):
    by_tenant = summarize_by_tenant(frame)
    assert by_tenant.index.tolist() == ["a", "b"]
    assert by_tenant["num_completed"].tolist() == [2, 1]
    total = summarize(frame)
    assert by_tenant["output_throughput"].sum() == pytest.approx(total["output_throughput"])
    assert by_tenant.loc["b", "mean_ttft_s"] == 0.5


@pytest.mark.slow
def test_frames_round_trip_through_parquet(frame, tmp_path):
    frame.to_parquet(tmp_path / "requests.parquet")
    back = pd.read_parquet(tmp_path / "requests.parquet")
    assert list(back["token_times_s"][0]) == [1.0, 1.5, 2.0]
