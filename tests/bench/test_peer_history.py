"""bench/peer_history.py: the peer comparisons as series per hardware, a regression flagged when
the new interval lies wholly below the previous one (tok/s, the ratio) or wholly above it (TTFT,
TPOT), a move within noise or a record without per-round numbers not flagged."""

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


def timed(day: str, ttft_p50: list[float], tpot_p99: list[float], sha: str = "a" * 40) -> dict:
    """A record whose rounds also carry their own TTFT p50 and TPOT p99 (ms); tok/s steady, the
    other percentiles constant across rounds (so without an interval)."""
    rec = record(day, [100.0, 101.0, 99.0], [50.0, 51.0, 49.0], sha=sha)
    side = rec["result"]["ours"]
    side["ttft_ms_rounds"] = {"p50": ttft_p50, "p99": [30.0] * len(ttft_p50)}
    side["tpot_ms_rounds"] = {"p50": [2.0] * len(tpot_p99), "p99": tpot_p99}
    return rec


def flags(records: list[dict]) -> list[tuple[str, str, str]]:
    series = peer_history.engine_series(records)
    return [(c.metric, c.kind, c.date) for c in peer_history.engine_changes(series)]


def test_tpot_rising_beyond_noise_is_a_regression_and_ttft_falling_an_improvement() -> None:
    records = [
        timed("2026-12-01", [100.0, 104.0, 96.0], [5.0, 5.2, 4.8], sha="a" * 40),
        # TTFT p50 fell to ~60 ms, TPOT p99 rose to ~8 ms: both wholly past the night before.
        timed("2026-12-02", [60.0, 62.0, 58.0], [8.0, 8.2, 7.8], sha="b" * 40),
    ]
    assert flags(records) == [
        ("ours TTFT p50", peer_history.IMPROVEMENT, "2026-12-02"),
        ("ours TPOT p99", peer_history.REGRESSION, "2026-12-02"),
    ]
    point = peer_history.engine_series(records)[0].points[1]
    tpot = point.values["ours TPOT p99"]
    assert tpot.estimate == pytest.approx(8.0) and tpot.lo < 8.0 < tpot.hi
    change = peer_history.engine_changes(peer_history.engine_series(records))[1]
    assert change.describe().startswith("engine TPU v6e x1: ours TPOT p99 regression beyond noise")


def test_a_latency_drift_within_noise_is_not_flagged() -> None:
    records = [
        timed("2026-12-01", [100.0, 104.0, 96.0], [5.0, 5.2, 4.8]),
        timed("2026-12-02", [102.0, 106.0, 97.0], [5.1, 5.3, 4.9]),
    ]
    assert flags(records) == []


def test_a_record_without_per_round_latencies_is_shown_and_not_flagged() -> None:
    # The older record has only its pooled percentiles (TPOT p99 5 ms); the newer one's rounds
    # are far above it, but there is no interval to compare with.
    old = record("2026-12-01", [100.0, 101.0, 99.0], [50.0, 51.0, 49.0])
    records = [old, timed("2026-12-02", [100.0, 104.0, 96.0], [50.0, 52.0, 48.0])]
    point = peer_history.engine_series(records)[0].points[0]
    assert (
        point.values["ours TPOT p99"].estimate == 5.0 and point.values["ours TPOT p99"].lo is None
    )
    assert flags(records) == []


def test_cpu_hosts_that_share_a_model_name_are_kept_apart_by_their_class() -> None:
    """A virtual machine names a Zen 3, a Zen 4 and a Zen 5 alike ("AMD EPYC"): the records'
    own host (vector ISA, CPU family and model) keeps each class its own series, so a slower
    class is never flagged as the faster one's regression."""

    def on(host: dict | None, day: str, ours: list[float]) -> dict:
        made = record(day, ours, [50.0, 51.0, 49.0], hardware={**CPU, "cpu_model": "AMD EPYC"})
        if host is not None:
            made["result"]["host"] = host
        return made

    zen5 = {"vector_isa": "avx512", "cpu_family": 26, "cpu_model_number": 2}
    zen4 = {"vector_isa": "avx512", "cpu_family": 25, "cpu_model_number": 17}
    zen3 = {"vector_isa": "avx2"}  # a record from before family and model were kept
    records = [
        on(zen5, "2026-12-01", [300.0, 301.0, 299.0]),
        on(zen4, "2026-12-02", [200.0, 201.0, 199.0]),
        on(zen3, "2026-12-03", [100.0, 101.0, 99.0]),
        on(None, "2026-12-03", [90.0, 91.0, 89.0]),  # older still: no host at all
        on(zen5, "2026-12-04", [302.0, 303.0, 301.0]),
    ]
    series = peer_history.engine_series(records)
    assert [(s.hardware, len(s.points)) for s in series] == [
        ("CPU (AMD EPYC family 26 model 2, avx512, 2 cores)", 2),
        ("CPU (AMD EPYC family 25 model 17, avx512, 2 cores)", 1),
        ("CPU (AMD EPYC, avx2, 2 cores)", 1),
        ("CPU (AMD EPYC, 2 cores)", 1),
    ]
    assert peer_history.engine_changes(series, "2026-12-01") == []
    # The same class, slower beyond noise, is flagged as before.
    slower = peer_history.engine_series(records + [on(zen5, "2026-12-05", [150.0, 151.0, 149.0])])
    flagged = peer_history.engine_changes(slower)
    assert {(c.hardware, c.metric, c.kind) for c in flagged} >= {
        ("CPU (AMD EPYC family 26 model 2, avx512, 2 cores)", "ours tok/s", peer_history.REGRESSION)
    }
