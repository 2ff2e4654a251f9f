"""harness/history.py: a claim's runs as series per hardware class, and the change rule
(a flip, a drift within noise, a shift beyond it, a design change, an unscored claim, a new
hardware class) on runs over several nights."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from history_helpers import D2, TODAY, history_claim, store_nights
from scoring_helpers import rows, store_run

from claimbench.harness import history, run_checks
from claimbench.harness.results import read_runs


def _history(results_dir: Path, designs=TODAY) -> history.ClaimHistory:
    runs, _ = read_runs(results_dir)
    return history.claim_history(history_claim(), runs, designs)


def _summary(changes: list[history.Change]) -> list[tuple]:
    return [(c.date, c.evidence, c.kind, c.before_commit, c.after_commit) for c in changes]


def test_each_hardware_class_is_a_series_of_every_run_oldest_first(tmp_path: Path) -> None:
    store_nights(tmp_path)
    h = _history(tmp_path)
    assert [(s.evidence, [p.date for p in s.points]) for s in h.series] == [
        ("tpu", ["2026-12-03"]),
        ("cpu", ["2026-11-29", "2026-11-30", "2026-12-01", "2026-12-02"]),
    ]
    cpu = h.series[1]
    assert [p.run.verdict for p in cpu.points] == ["confirmed"] * 2 + ["refuted"] * 2
    # The d1 runs may not be scored today (an earlier design); the d2 run may.
    assert [p.run.exclusion for p in cpu.points] == [run_checks.EARLIER_DESIGN] * 3 + [None]
    assert cpu.points[0].run.conditions[0].ci_lo is not None


def test_a_flip_and_a_shift_are_found_a_drift_within_noise_is_not(tmp_path: Path) -> None:
    store_nights(tmp_path)
    changes = history.changes_since([_history(tmp_path)], "2026-11-29")
    a, b, c, d, e = ("a" * 10, "b" * 10, "c" * 10, "d" * 10, "e" * 10)
    assert _summary(changes) == [
        ("2026-12-03", "tpu", history.NEW_CLASS, None, e),
        ("2026-11-29", "cpu", history.NEW_CLASS, None, a),
        # 11-30 drifted within its interval: nothing.
        ("2026-12-01", "cpu", history.FLIP, b, c),
        ("2026-12-01", "cpu", history.SHIFT, b, c),
        ("2026-12-02", "cpu", history.DESIGN_CHANGED, c, d),
    ]
    flip, shift = changes[2], changes[3]
    assert (flip.before, flip.after) == ("confirmed", "refuted")
    assert shift.condition == "gain >= 1.5" and shift.before.startswith("2.02 [")
    assert "verdict flipped: confirmed -> refuted (bbbbbbbbbb -> cccccccccc" in flip.describe()


def test_since_defaults_to_last_night(tmp_path: Path) -> None:
    store_nights(tmp_path)
    h = _history(tmp_path)
    assert history.last_night([h]) == "2026-12-03"
    assert _summary(history.changes_since([h])) == [
        ("2026-12-03", "tpu", history.NEW_CLASS, None, "e" * 10)
    ]
    assert [c.kind for c in history.changes_since([h], "2026-12-02")] == [
        history.NEW_CLASS,
        history.DESIGN_CHANGED,
    ]


def test_a_claim_whose_design_changed_since_its_runs_is_unscored(tmp_path: Path) -> None:
    store_nights(tmp_path)
    h = _history(tmp_path, designs={"c": "d3" * 8})
    unscored = [c for c in history.changes_since([h]) if c.kind == history.UNSCORED]
    # A state, listed whatever the window: both classes have no run of today's design.
    assert [(c.evidence, c.after_run) for c in unscored] == [
        ("tpu", h.series[0].points[-1].run.run_id),
        ("cpu", h.series[1].points[-1].run.run_id),
    ]


def test_a_dirty_run_and_a_run_of_another_profile_are_not_compared(tmp_path: Path) -> None:
    c = history_claim()
    meta = {"design_hash": D2, "git": {"sha": "a" * 40, "dirty": False}}
    store_run(
        tmp_path, c, rows("gain", [2.0, 2.1, 1.9, 2.0, 2.05]), day="2026-11-29", extra_meta=meta
    )
    dirty = meta | {"git": {"sha": "b" * 40, "dirty": True}}
    store_run(
        tmp_path, c, rows("gain", [1.0, 1.1, 0.9, 1.0, 1.05]), day="2026-11-30", extra_meta=dirty
    )
    store_run(
        tmp_path,
        c,
        rows("gain", [1.0, 1.1, 0.9, 1.0, 1.05]),
        day="2026-12-01",
        profile="full",
        extra_meta=meta,
    )
    store_run(
        tmp_path, c, rows("gain", [2.0, 2.1, 1.9, 2.0, 2.02]), day="2026-12-02", extra_meta=meta
    )
    kinds = [ch.kind for ch in history.changes_since([_history(tmp_path)], "2026-11-29")]
    assert kinds == [history.NEW_CLASS]


@pytest.mark.parametrize(
    ("before", "after", "moved"),
    [
        ((2.0, 1.9, 2.1), (2.05, 1.95, 2.15), False),  # intervals overlap: noise
        ((2.0, 1.9, 2.1), (1.2, 1.1, 1.3), True),  # wholly below
        ((2.0, 1.9, 2.1), (2.3, 2.2, 2.4), True),  # wholly above
        ((2.0, None, None), (5.0, None, None), False),  # no interval: not compared
    ],
)
def test_shifted_means_the_intervals_do_not_overlap(before, after, moved, tmp_path) -> None:
    (run,) = store_nights(tmp_path)[:1]
    cs = history.claim_history(history_claim(), [run]).series[0].points[0].run.conditions[0]

    def score(est, lo, hi):
        return replace(cs, estimate=est, ci_lo=lo, ci_hi=hi, method="t" if lo else "single")

    assert history.shifted(score(*before), score(*after)) is moved
    exact = replace(cs, method="exact", ci_lo=None, ci_hi=None)
    assert history.shifted(exact, replace(exact, estimate=cs.estimate + 1e-9))


@pytest.mark.slow
def test_the_stored_runs_make_a_history() -> None:
    # The project's own results: 120 runs on four nights between 2026-11-29 and 2026-12-03
    # (later nights add runs; the history of these four must stay as it is).
    from claimbench.harness.claims import load_claims

    root = Path(__file__).resolve().parents[2]
    runs, _ = read_runs(root / "results")
    runs = [r for r in runs if r.run_id < "20261204"]
    claims = load_claims(root)
    histories = [
        history.claim_history(c, runs, run_checks.today_designs(root, claims)) for c in claims
    ]
    seen = {p.run.run_id for h in histories for s in h.series for p in s.points}
    assert seen == {r.run_id for r in runs} and len(seen) == 120
    dates = {p.date for h in histories for s in h.series for p in s.points}
    assert dates == {"2026-11-29", "2026-11-30", "2026-12-01", "2026-12-03"}
    assert history.last_night(histories) == "2026-12-03"
    changes = history.changes_since(histories, "2026-11-29")
    # The runs before 12-03 predate design hashes: listed, never compared. Those of 12-03 each
    # measured another design than the one before, and none is of today's design: so there is
    # no flip or shift to report, only design changes, unscored claims and new classes.
    assert {c.kind for c in changes} == {
        history.NEW_CLASS,
        history.DESIGN_CHANGED,
        history.UNSCORED,
    }
    unhashed = {r.run_id for r in runs if "design_hash" not in r.meta}
    assert len(unhashed) == 66
    compared = {c.before_run for c in changes} | {
        c.after_run for c in changes if c.kind == history.DESIGN_CHANGED
    }
    assert not compared & unhashed
