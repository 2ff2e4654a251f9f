"""bench/peer_history.py: the peer comparisons as series per hardware, a regression flagged when
the new interval lies wholly below the previous one, a move within noise not flagged."""

from __future__ import annotations

import pytest
from history_helpers import CPU, peer_record

from claimbench.bench import peer_history

record = peer_record


def test_series_per_hardware_with_intervals_from_the_rounds() -> None:
    records = [
        record("2026-12-01", [100.0, 102.0, 98.0], [50.0, 50.0, 50.0]),
        record("2026-12-01", [30.0, 31.0, 29.0], [20.0, 21.0, 19.0], hardware=CPU),
        {"peer": "vllm", "status": "not-measured", "time": "2026-12-02T03:00:00+00:00"},
    ]
    series = peer_history.engine_series(records)
    assert [(s.hardware, len(s.points)) for s in series] == [
        ("TPU v6e x1", 1),
        ("CPU (Xeon, 2 cores)", 1),
    ]
    point = series[0].points[0]
    tok_s = point.values["ours tok/s"]
    assert tok_s.estimate == pytest.approx(100.0) and tok_s.lo < 100.0 < tok_s.hi
    assert point.values["ours / peer"].estimate == pytest.approx(2.0, rel=0.01)
    assert (point.ttft_p99_ms, point.tpot_p50_ms) == (30.0, 2.0)


def test_a_regression_beyond_noise_is_flagged_a_drift_within_it_is_not() -> None:
    records = [
        record("2026-12-01", [100.0, 102.0, 98.0], [50.0, 51.0, 49.0], sha="a" * 40),
        # Within noise: the intervals overlap.
        record("2026-12-02", [99.0, 101.0, 97.0], [50.0, 51.0, 49.0], sha="b" * 40),
        # Ours fell to 80: wholly below; vLLM unchanged, so the ratio fell too.
        record("2026-12-03", [80.0, 81.0, 79.0], [50.0, 51.0, 49.0], sha="c" * 40),
    ]
    series = peer_history.engine_series(records)
    assert peer_history.engine_changes(series, "2026-12-02") == peer_history.engine_changes(series)
    changes = peer_history.engine_changes(series)
    assert [(c.metric, c.kind, c.date) for c in changes] == [
        ("ours tok/s", peer_history.REGRESSION, "2026-12-03"),
        ("ours / peer", peer_history.REGRESSION, "2026-12-03"),
    ]
    assert changes[0].before_commit == "b" * 40 and changes[0].after_commit == "c" * 40
    assert "bbbbbbbbbb -> cccccccccc" in changes[0].describe()
    # The other way round it is an improvement.
    back = peer_history.engine_series(
        [records[2], {**records[0], "time": "2026-12-04T03:00:00+00:00"}]
    )
    assert {c.kind for c in peer_history.engine_changes(back)} == {peer_history.IMPROVEMENT}


def test_a_record_of_one_round_has_no_interval_and_is_never_flagged() -> None:
    records = [
        record("2026-12-01", [100.0], [50.0]),
        record("2026-12-02", [10.0], [50.0]),
    ]
    assert peer_history.engine_changes(peer_history.engine_series(records)) == []
