"""Scoring: condition statuses, the basis and scope rules, groups per class, prediction hashes."""

from __future__ import annotations

import pytest
from scoring_helpers import claim, rows, store_run

from claimbench.harness import condition_scores, scoring
from claimbench.harness.claims import Condition

TWO = [
    {"metric": "gain", "op": ">=", "value": 1.5},
    {"metric": "mismatch", "op": "<=", "value": 0.5},
]
ANALYTIC_AND_MEASURED = [
    {"metric": "capacity_ratio", "op": ">=", "value": 1.9, "basis": "analytic"},
    {"metric": "ppl_delta_pct", "op": "<=", "value": 0.5},
]


def test_interval_status_by_op():
    ge = Condition(metric="m", op=">=", value=1.0)
    assert condition_scores.interval_status(ge, 1.0, 2.0) == "holds"  # touching the threshold is in
    assert condition_scores.interval_status(ge, 0.2, 0.9) == "fails"
    assert condition_scores.interval_status(ge, 0.9, 1.1) == "unclear"
    lt = Condition(metric="m", op="<", value=10.0)
    assert condition_scores.interval_status(lt, 3.0, 9.9) == "holds"
    assert condition_scores.interval_status(lt, 10.0, 12.0) == "fails"  # 10 is not < 10


def test_trial_values_average_within_a_trial(tmp_path):
    data = [("m", 0, 1.0, "cpu"), ("m", 0, 3.0, "cpu"), ("m", 1, 5.0, "cpu"), ("x", 0, 9, "cpu")]
    run = store_run(tmp_path, claim(), data)
    assert condition_scores.trial_values(run.measurements, "m").tolist() == [2.0, 5.0]


# --- one condition ---------------------------------------------------------------------------


def test_confirmed_with_a_t_interval(tmp_path):
    run = store_run(tmp_path, claim(), rows("gain", [2.0, 2.1, 1.9]))
    score = scoring.score_claim(claim(), [run])
    assert score.verdict == "confirmed" and score.decided
    (cs,) = score.conditions
    # mean 2, sd 0.1, n 3: 2 +- 4.303 * 0.1 / sqrt(3) = 2 +- 0.248
    assert (cs.estimate, cs.method) == (pytest.approx(2.0), "t")
    assert (cs.ci_lo, cs.ci_hi) == pytest.approx((1.7516, 2.2484), abs=1e-3)
    assert (cs.status, cs.evidence, cs.in_scope, cs.run_id) == ("holds", "cpu", True, run.run_id)


def test_refuted_and_unclear(tmp_path):
    low = store_run(tmp_path / "a", claim(), rows("gain", [1.0, 1.1, 0.9]))
    assert scoring.score_claim(claim(), [low]).verdict == "refuted"
    # 1.6 +- 0.25 straddles 1.5. (The old percentile bootstrap gave [1.5, 1.7]: holds.)
    mid = store_run(tmp_path / "b", claim(), rows("gain", [1.5, 1.6, 1.7]))
    score = scoring.score_claim(claim(), [mid])
    assert (score.conditions[0].status, score.verdict) == ("unclear", "inconclusive")


def test_constant_trials_are_unclear_not_a_zero_width_interval(tmp_path):
    run = store_run(tmp_path, claim(), rows("gain", [1.9, 1.9, 1.9]))
    score = scoring.score_claim(claim(), [run])
    (cs,) = score.conditions
    assert cs.constant and (cs.ci_lo, cs.ci_hi) == (None, None)
    assert (cs.status, score.verdict, score.decided) == ("unclear", "inconclusive", False)


def test_too_few_trials(tmp_path):
    run = store_run(tmp_path, claim(), rows("gain", [2.0, 2.1]))
    score = scoring.score_claim(claim(), [run])
    assert (score.conditions[0].status, score.verdict) == ("too-few-trials", "inconclusive")


@pytest.mark.parametrize(
    ("profile", "num_trials", "status"),
    [("quick", 4, "too-few-trials"), ("quick", 5, "holds"), ("full", 9, "too-few-trials")],
)
def test_timing_metrics_need_more_trials(tmp_path, profile, num_trials, status):
    timed = claim(conditions=[{"metric": "p99_ttft_ratio", "op": ">=", "value": 1.5}])
    values = [2.0 + 0.01 * t for t in range(num_trials)]
    run = store_run(tmp_path, timed, rows("p99_ttft_ratio", values), profile=profile)
    (cs,) = scoring.score_claim(timed, [run]).conditions
    assert cs.status == status
    # A non-timing metric of the same values needs only 3.
    plain = claim()
    other = store_run(tmp_path / "o", plain, rows("gain", values[:3]), profile=profile)
    assert scoring.score_claim(plain, [other]).conditions[0].status == "holds"


def test_missing_metric_is_inconclusive_but_a_failure_still_refutes(tmp_path):
    two = claim(conditions=TWO)
    run = store_run(tmp_path / "a", two, rows("gain", [2.0, 2.1, 2.2]))
    score = scoring.score_claim(two, [run])
    assert [c.status for c in score.conditions] == ["holds", "missing"]
    assert score.verdict == "inconclusive"
    run = store_run(tmp_path / "b", two, rows("gain", [1.0, 1.1, 1.2]))
    assert scoring.score_claim(two, [run]).verdict == "refuted"


# --- scope and classes -----------------------------------------------------------------------


def test_not_run(tmp_path):
    other = store_run(tmp_path, claim(id="d"), rows("gain", [2.0, 2.1, 2.2]))
    score = scoring.score_claim(claim(), [other])
    assert (score.verdict, score.headline, score.groups) == ("not-run", None, ())


def test_out_of_scope_evidence_is_indicative_only(tmp_path):
    tpu_claim = claim(scope="tpu")
    run = store_run(tmp_path, tpu_claim, rows("gain", [2.0, 2.1, 2.2]))
    score = scoring.score_claim(tpu_claim, [run])
    assert (score.verdict, score.headline, score.decided) == ("indicative-only", None, False)
    assert score.shown.run_id == run.run_id and score.conditions[0].status == "holds"
    (group,) = score.groups
    assert (group.evidence, group.in_scope, group.scored.verdict) == ("cpu", False, "confirmed")


def test_accelerator_scope_takes_gpu_not_cpu(tmp_path):
    acc = claim(scope="accelerator")
    cpu = store_run(tmp_path, acc, rows("gain", [1.0, 1.1, 1.2]), hour=11)
    gpu = store_run(tmp_path, acc, rows("gain", [2.0, 2.1, 2.2], "gpu"), hour=10, platform="gpu")
    score = scoring.score_claim(acc, [cpu, gpu])
    assert (score.verdict, score.headline.evidence) == ("confirmed", "gpu")


def test_a_later_cpu_run_does_not_displace_tpu_evidence(tmp_path):
    any_claim = claim()
    tpu = store_run(tmp_path, any_claim, rows("gain", [1.0, 1.1, 1.2], "tpu"), hour=9)
    cpu = store_run(tmp_path, any_claim, rows("gain", [2.0, 2.1, 2.2]), hour=12)
    score = scoring.score_claim(any_claim, [cpu, tpu])
    assert [g.evidence for g in score.groups] == ["tpu", "cpu"]
    assert (score.verdict, score.headline.run_id) == ("refuted", tpu.run_id)
    assert score.group("cpu").scored.verdict == "confirmed"  # still shown, in its own group


# --- basis -----------------------------------------------------------------------------------


def test_analytic_values_cannot_decide_a_measured_condition(tmp_path):
    # A tpu claim whose measured metric was computed: no evidence at all, not a confirmation.
    tpu_claim = claim(scope="tpu")
    run = store_run(tmp_path / "a", tpu_claim, rows("gain", [2.0], "analytic"))
    assert scoring.score_claim(tpu_claim, [run]).verdict == "not-run"
    # A measured run missing a measured metric is never filled from the run's analytic values.
    two = claim(conditions=TWO)
    data = rows("gain", [2.0, 2.1, 2.2]) + rows("mismatch", [0.0], "analytic")
    score = scoring.score_claim(two, [store_run(tmp_path / "b", two, data)])
    assert (score.conditions[1].status, score.conditions[1].evidence) == ("missing", None)
    assert score.verdict == "inconclusive"


def test_analytic_condition_is_decided_exactly_by_analytic_evidence(tmp_path):
    both = claim(conditions=ANALYTIC_AND_MEASURED)
    data = rows("capacity_ratio", [1.94], "analytic") + rows("ppl_delta_pct", [0.1, 0.2, 0.15])
    score = scoring.score_claim(both, [store_run(tmp_path / "a", both, data)])
    assert score.verdict == "confirmed" and score.decided
    analytic = score.conditions[0]
    assert (analytic.evidence, analytic.method, analytic.status) == ("analytic", "exact", "holds")
    assert (analytic.ci_lo, analytic.ci_hi) == (1.94, 1.94)
    assert [g.evidence for g in score.groups] == ["cpu", "analytic"]
    # 1.89 < 1.9 refutes although the measured condition holds: every condition must hold.
    data = rows("capacity_ratio", [1.89], "analytic") + rows("ppl_delta_pct", [0.1, 0.2, 0.15])
    assert scoring.score_claim(both, [store_run(tmp_path / "b", both, data)]).verdict == "refuted"


def test_measured_values_of_an_analytic_metric_decide_nothing(tmp_path):
    # Older runs copied arithmetic into cpu trials; under basis analytic those are not evidence.
    both = claim(conditions=ANALYTIC_AND_MEASURED)
    data = rows("capacity_ratio", [1.94] * 3) + rows("ppl_delta_pct", [0.1, 0.2, 0.15])
    score = scoring.score_claim(both, [store_run(tmp_path, both, data)])
    assert score.conditions[0].status == "missing" and score.verdict == "inconclusive"


def test_analytic_holding_never_confirms_without_in_scope_measurement(tmp_path):
    tpu_claim = claim(scope="tpu", conditions=ANALYTIC_AND_MEASURED)
    analytic = rows("capacity_ratio", [1.94], "analytic")
    only_analytic = store_run(tmp_path / "a", tpu_claim, analytic)
    score = scoring.score_claim(tpu_claim, [only_analytic])
    assert score.verdict == "inconclusive"
    assert [c.status for c in score.conditions] == ["holds", "missing"]
    with_cpu = store_run(tmp_path / "b", tpu_claim, analytic + rows("ppl_delta_pct", [0.1, 0.2]))
    assert scoring.score_claim(tpu_claim, [with_cpu]).verdict == "indicative-only"


def test_analytic_only_claim_is_decided_by_its_value(tmp_path):
    arithmetic = claim(
        conditions=[{"metric": "kv_over_weights", "op": ">=", "value": 1.0, "basis": "analytic"}]
    )
    run = store_run(tmp_path, arithmetic, rows("kv_over_weights", [0.4], "analytic"))
    score = scoring.score_claim(arithmetic, [run])
    assert (score.verdict, score.shown.evidence, score.decided) == ("refuted", "analytic", True)


# --- prediction hash and replications --------------------------------------------------------


def test_a_run_against_an_earlier_prediction_is_not_scored(tmp_path):
    c = claim()
    old = store_run(tmp_path, c, rows("gain", [1.0, 1.1, 1.2]), hour=9)
    stale = store_run(tmp_path, c, rows("gain", [2.0, 2.1, 2.2]), hour=12, current=False)
    score = scoring.score_claim(c, [stale, old])
    (group,) = score.groups
    assert group.scored.run_id == old.run_id and score.verdict == "refuted"
    assert [r.run_id for r in group.earlier_runs] == [stale.run_id]
    assert score.num_earlier == 1
    # With only the stale run nothing is scored.
    alone = scoring.score_claim(c, [stale])
    assert (alone.verdict, alone.num_earlier) == ("not-run", 1)


def test_a_run_without_a_hash_is_not_scored(tmp_path):
    c = claim()
    run = store_run(
        tmp_path, c, rows("gain", [2.0, 2.1, 2.2]), extra_meta={"prediction_hash": None}
    )
    assert scoring.score_claim(c, [run]).verdict == "not-run"


def test_replications_are_counted(tmp_path):
    c = claim()
    runs = [
        store_run(tmp_path, c, rows("gain", [2.0, 2.1, 2.2]), hour=9),
        store_run(tmp_path, c, rows("gain", [1.0, 1.1, 1.2]), hour=10),
        store_run(tmp_path, c, rows("gain", [2.5, 2.6, 2.4]), hour=11),
        store_run(tmp_path, c, rows("gain", [1.0, 1.1, 1.2]), hour=12, current=False),
    ]
    (group,) = scoring.score_claim(c, runs).groups
    assert [r.run_id[9:11] for r in group.runs] == ["12", "11", "10", "09"]  # newest first
    assert group.scored.run_id[9:11] == "11"
    assert (len(group.current_runs), group.num_agree) == (3, 2)


def test_score_claims_keeps_file_order_and_counts(tmp_path):
    claims = [claim(id="a"), claim(id="b"), claim(id="c", scope="tpu")]
    runs = [
        store_run(tmp_path, claims[0], rows("gain", [2, 2.1, 2.2])),
        store_run(tmp_path, claims[2], rows("gain", [2, 2.1, 2.2])),
    ]
    scores = scoring.score_claims(claims, runs)
    assert [s.verdict for s in scores] == ["confirmed", "not-run", "indicative-only"]
    assert scoring.verdict_counts(scores) == {
        "confirmed": 1,
        "refuted": 0,
        "inconclusive": 0,
        "indicative-only": 1,
        "not-run": 1,
    }


def test_format_value():
    assert scoring.format_value(1.2345) == "1.23"
    assert scoring.format_value(123456.7) == "123,457"
    assert scoring.format_value(None) == "-"


def test_a_never_condition_is_an_observation_checked_by_its_control(tmp_path):
    """``metric <= 0`` predicts an event never happens: one event in one trial fails it; zero in
    every trial holds only if the positive control (the same measurement where the event can
    happen) fired in at least the trial minimum of those trials."""
    never = claim(conditions=[{"metric": "preemptions", "op": "<=", "value": 0}])
    assert condition_scores.is_never_condition(never.prediction[0])
    assert not condition_scores.is_never_condition(Condition(metric="x", op="<=", value=1))
    zeros = rows("preemptions", [0, 0, 0], unit="preemptions")

    def status(name, data):
        (cs,) = scoring.score_claim(never, [store_run(tmp_path / name, never, data)]).conditions
        return cs

    fired = status("fired", zeros + rows("preemptions_control", [2, 1, 3]))
    assert (fired.status, fired.method, fired.num_control_fired) == ("holds", "never", 3)
    assert fired.control_values == (2.0, 1.0, 3.0)
    # No control, a silent control, or one that fired in too few trials: nothing was shown.
    assert status("none", zeros).status == "unclear"
    assert status("silent", zeros + rows("preemptions_control", [0, 0, 0])).status == "unclear"
    partial = status("partial", zeros + rows("preemptions_control", [0, 4, 1]))
    assert (partial.status, partial.num_control_fired) == ("unclear", 2)
    # An event is an event, control or not.
    one = rows("preemptions", [0, 1, 0], unit="preemptions")
    assert status("one", one).status == "fails"
    short = rows("preemptions", [0, 0], unit="preemptions") + rows("preemptions_control", [1, 1])
    assert status("short", short).status == "too-few-trials"
    # An event is conclusive however few trials saw it.
    assert status("one-of-two", rows("preemptions", [0, 2], unit="preemptions")).status == "fails"


# --- realised load, profiles, classes that disagree, model class, shares ---------------------


def test_a_trial_off_its_realised_load_is_reported_not_scored(tmp_path):
    c = claim()
    # Trial 1 offered 1.1x instead of 2x and, at the low load, looked like a success.
    on = {"target": 2.0, "tolerance": 0.25}
    data = rows("gain", [1.0, 3.0, 1.1, 1.2]) + [
        ("realised_load", 0, 2.05, "cpu", "x", on),
        ("realised_load", 1, 1.10, "cpu", "x", on),
        ("realised_load", 2, 1.95, "cpu", "x", on),
        ("realised_load", 3, 2.00, "cpu", "x", on),
        ("trial_off_target", 1, 1.0, "cpu"),
    ]
    run = store_run(tmp_path, c, data)
    score = scoring.score_claim(c, [run])
    (failed,) = score.headline.failed_trials
    assert (failed.trial, failed.realised_load) == (1, pytest.approx(1.1))
    (cs,) = score.conditions
    assert cs.trial_values == (1.0, 1.1, 1.2) and score.verdict == "refuted"
    # Too few trials left on target: undecided, never filled from the failed one.
    short = store_run(tmp_path / "s", c, data[:2] + data[4:6] + [("trial_off_target", 1, 1, "cpu")])
    assert scoring.score_claim(c, [short]).conditions[0].status == "too-few-trials"


def test_the_scorer_finds_an_off_target_trial_from_its_own_record(tmp_path):
    """The off-target flag deleted, today's rule still drops the trial from its realised-load
    labels: a load off by more than the tolerance, or saturation readings bracketing the
    trial further apart than the tolerance (the host moved under it); a garbled record
    (no target) counts as off too."""
    c = claim()
    on = {"target": 2.0, "tolerance": 0.25}
    data = rows("gain", [1.0, 3.0, 1.1, 1.2, 3.0, 3.0]) + [
        ("realised_load", 0, 2.05, "cpu", "x", on),
        ("realised_load", 1, 1.10, "cpu", "x", on),  # no flag: off by its own labels
        ("realised_load", 2, 1.95, "cpu", "x", on | {"readings_tok_s": [1000.0, 1200.0]}),
        ("realised_load", 3, 2.00, "cpu", "x", on),
        ("realised_load", 4, 2.00, "cpu", "x", on | {"readings_tok_s": [1000.0, 1300.0]}),
        ("realised_load", 5, 2.00, "cpu", "x", {}),
    ]
    score = scoring.score_claim(c, [store_run(tmp_path, c, data)])
    failed = {f.trial: f.reason for f in score.headline.failed_trials}
    assert failed == {
        1: "realised load off target",
        4: "service rate moved under the trial",
        5: "realised load without its target and tolerance",
    }
    assert score.conditions[0].trial_values == (1.0, 1.1, 1.2)


def test_a_full_run_outranks_a_newer_quick_one(tmp_path):
    c = claim()
    full = store_run(tmp_path, c, rows("gain", [1.0, 1.1, 1.2]), hour=9, profile="full")
    quick = store_run(tmp_path, c, rows("gain", [2.0, 2.1, 2.2]), hour=12)
    score = scoring.score_claim(c, [quick, full])
    assert (score.verdict, score.headline.run_id) == ("refuted", full.run_id)
    assert score.group("cpu").num_agree == 1  # the quick run disagrees, and shows it


def test_in_scope_classes_that_disagree_are_shown(tmp_path):
    any_claim = claim()
    tpu = store_run(tmp_path, any_claim, rows("gain", [1.0, 1.1, 1.2], "tpu"), hour=9)
    cpu = store_run(tmp_path, any_claim, rows("gain", [2.0, 2.1, 2.2]), hour=12)
    score = scoring.score_claim(any_claim, [cpu, tpu])
    assert score.verdict == "refuted"
    assert [(g.evidence, g.scored.verdict) for g in score.disagreements] == [("cpu", "confirmed")]
    # Out of scope, the same cpu run is indicative, not a disagreement.
    tpu_claim = claim(scope="tpu", id="t")
    runs = [
        store_run(tmp_path / "t", tpu_claim, rows("gain", [1.0, 1.1, 1.2], "tpu"), hour=9),
        store_run(tmp_path / "t", tpu_claim, rows("gain", [2.0, 2.1, 2.2]), hour=12),
    ]
    assert scoring.score_claim(tpu_claim, runs).disagreements == ()


def _model(num_params: int) -> dict:
    return {
        "model": {
            "name": "m",
            "architecture": {"num_params": num_params},
            "weights_sha256": {"model.safetensors": "e" * 64},
        }
    }


def test_a_model_class_condition_is_decided_only_by_a_model_of_that_class(tmp_path):
    quality = claim(
        conditions=[
            {"metric": "gain", "op": ">=", "value": 1.5},
            {"metric": "ppl_delta_pct", "op": "<=", "value": 1.0, "model_class": "8b"},
        ]
    )
    data = rows("gain", [2.0, 2.1, 2.2]) + rows("ppl_delta_pct", [0.1, 0.2, 0.3], unit="%")
    tiny = store_run(tmp_path / "a", quality, data, extra_meta=_model(4_196_608))
    score = scoring.score_claim(quality, [tiny])
    gain, ppl = score.conditions
    assert (gain.in_scope, gain.status) == (True, "holds")
    assert (ppl.in_scope, ppl.status) == (False, "holds")
    assert "4.2M-parameter model" in ppl.scope_note and "8b" in ppl.scope_note
    assert score.shown.info.model_label == "m @eeeeeeee (4.2M params)"
    assert (score.verdict, score.decided) == ("indicative-only", False)
    # The same values from an 8B-class model decide it.
    eight = store_run(tmp_path / "b", quality, data, extra_meta=_model(7_615_616_512))
    assert scoring.score_claim(quality, [eight]).verdict == "confirmed"
    # A tiny model's failure refutes nothing about an 8B model either.
    bad = rows("gain", [2.0, 2.1, 2.2]) + rows("ppl_delta_pct", [3.0, 3.1, 3.2], unit="%")
    tiny_bad = store_run(tmp_path / "c", quality, bad, extra_meta=_model(4_196_608))
    assert scoring.score_claim(quality, [tiny_bad]).verdict == "indicative-only"
    # A run that did not record its model's size decides nothing about a class.
    unknown = store_run(tmp_path / "d", quality, data)
    assert not scoring.score_claim(quality, [unknown]).conditions[1].in_scope


def test_a_share_condition_gets_a_bounded_interval(tmp_path):
    attainment = claim(
        conditions=[{"metric": "premium_slo_attainment_pct", "op": ">=", "value": 99.0}]
    )
    # An SLO share is a timing metric: 5 trials in quick.
    data = rows("premium_slo_attainment_pct", [99.9, 91.0, 99.5, 98.0, 99.8], unit="%")
    (cs,) = scoring.score_claim(attainment, [store_run(tmp_path, attainment, data)]).conditions
    assert cs.method == "logit-t" and 0.0 <= cs.ci_lo < cs.ci_hi <= 100.0
    assert cs.status == "unclear"
