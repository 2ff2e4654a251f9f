"""The claims loader: the shipped claims.yaml, and every way a claims file is rejected."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write_claims

from claimbench.harness import registry
from claimbench.harness.claims import ClaimsError, find_claim, load_claims

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
- id: kv-int8
  part: 5
  title: An int8 KV cache
  statement: An int8 KV cache holds more.
  confidence: 0.8
  scope: any
  prediction:
    - {metric: capacity_ratio, op: ">=", value: 1.9}
  refuted_if: It does not.
"""

# The table of claims the series makes: id -> (part, scope, confidence, conditions).
SERIES = {
    "tenant-tail-hidden": (2, "any", 0.7, 1),
    "headroom-binds": (2, "accelerator", 0.75, 2),
    "host-starvation": (3, "accelerator", 0.6, 2),
    "admission-at-ingress": (3, "any", 0.85, 2),
    "decode-bandwidth-bound": (4, "tpu", 0.7, 2),
    "tp-refutation": (4, "tpu", 0.55, 2),
    "bf16-not-fp16": (5, "tpu", 0.85, 2),
    "fp8-weights": (5, "any", 0.8, 3),
    "kv-int8": (5, "any", 0.8, 2),
    "kv-fp8": (5, "any", 0.7, 2),
    "levers-multiply": (5, "any", 0.7, 2),
    "kv-dominates": (6, "any", 0.9, 1),
    "paged-waste": (6, "any", 0.9, 3),
    "prefix-leak": (6, "any", 0.85, 3),
    "pool-quotas": (6, "any", 0.65, 2),
    "continuous-batching": (7, "accelerator", 0.9, 1),
    "fairness-vtc": (7, "any", 0.8, 3),
    "priority-aging": (7, "any", 0.7, 3),
    "fair-victim": (7, "any", 0.6, 2),
    "spec-decode-gain": (8, "accelerator", 0.75, 2),
    "spec-vs-batching": (8, "accelerator", 0.7, 1),
    "moe-disqualified": (8, "tpu", 0.8, 3),
    "early-exit": (8, "any", 0.6, 2),
    "cold-start": (9, "tpu", 0.85, 3),
    "bucket-padding": (9, "any", 0.7, 2),
    "degradation-ladder": (9, "any", 0.75, 2),
    "heterogeneous-asset": (9, "accelerator", 0.65, 1),
}


def test_shipped_claims_match_the_series():
    claims = load_claims(REPO)
    got = {c.id: (c.part, c.scope, c.confidence, len(c.prediction)) for c in claims}
    assert got == SERIES
    for claim in claims:
        assert claim.statement.endswith("."), claim.id
        assert len(claim.statement.split()) >= 12, claim.id
        # The scope rule: every claim says in one sentence why its scope is what it is.
        assert claim.scope_reason.endswith(".") and claim.scope_reason.count(". ") == 0, claim.id


def test_prediction_hash_moves_with_the_prediction_not_the_words():
    claim = find_claim(load_claims(REPO), "kv-int8")
    same = claim.model_copy(update={"title": "another title"})
    assert same.prediction_hash("quick") == claim.prediction_hash("quick")
    moved = claim.model_copy(
        update={"prediction": [c.model_copy(update={"value": 1.8}) for c in claim.prediction]}
    )
    assert moved.prediction_hash("quick") != claim.prediction_hash("quick")
    surer = claim.model_copy(update={"confidence": 0.9})
    assert surer.prediction_hash("quick") != claim.prediction_hash("quick")


def test_model_class_marks_quality_conditions_outside_the_hash():
    claims = load_claims(REPO)
    # Quantization quality depends on the model class the claims name (Llama-3.1-8B).
    for claim_id in ("fp8-weights", "kv-int8", "kv-fp8", "levers-multiply"):
        claim = find_claim(claims, claim_id)
        classes = {c.metric: c.model_class for c in claim.prediction}
        assert {m for m, k in classes.items() if k == "8b"}, claim_id
        assert all(k is None for m, k in classes.items() if m.endswith("_ratio")), claim_id
    # An evidence rule, like scope: not part of the prediction a run is measured against.
    claim = find_claim(claims, "kv-int8")
    unclassed = claim.model_copy(
        update={
            "prediction": [c.model_copy(update={"model_class": None}) for c in claim.prediction]
        }
    )
    assert unclassed.prediction_hash("quick") == claim.prediction_hash("quick")


def test_analytic_basis_marks_arithmetic_conditions():
    claims = load_claims(REPO)
    capacity = find_claim(claims, "kv-int8").prediction[0]
    assert (capacity.metric, capacity.basis) == ("capacity_ratio", "analytic")
    assert find_claim(claims, "kv-int8").prediction[1].basis == "measured"


def test_shipped_condition_metrics():
    claims = load_claims(REPO)
    headroom = find_claim(claims, "headroom-binds").prediction
    assert [(c.metric, c.op, c.value) for c in headroom] == [
        ("knee_over_kv_exhaustion", ">=", 0.85),
        ("knee_over_kv_exhaustion", "<=", 1.15),
    ]
    decode = find_claim(claims, "decode-bandwidth-bound").prediction
    assert [str(c) for c in decode] == ["step_over_roofline <= 1.3", "mfu_pct < 10"]


def test_status_of_shipped_claims():
    claims = load_claims(REPO)
    kv = find_claim(claims, "kv-dominates")
    assert registry.has_experiment(REPO, kv)
    assert registry.claim_status(REPO, kv, "not-run") == "not run"
    for claim in claims:
        if not registry.has_experiment(REPO, claim):
            assert registry.claim_status(REPO, claim, "not-run") == "no experiment yet"


def test_default_module_name_and_profile_params(tmp_path):
    write_claims(tmp_path, GOOD)
    (claim,) = load_claims(tmp_path)
    assert claim.module_name == "kv_int8"
    assert claim.profile_params("quick") == {}
    assert registry.experiment_path(tmp_path, claim) == tmp_path / "experiments" / "kv_int8.py"
    assert registry.claim_status(tmp_path, claim, "not-run") == "no experiment yet"
    with pytest.raises(ValueError, match="profile 'huge'"):
        claim.profile_params("huge")


def test_condition_holds():
    claims = load_claims(REPO)
    (ge,) = find_claim(claims, "kv-dominates").prediction
    assert ge.holds(1.0) and ge.holds(2.0) and not ge.holds(0.99)
    lt = find_claim(claims, "decode-bandwidth-bound").prediction[1]
    assert lt.holds(9.9) and not lt.holds(10.0)


BAD_CASES = {
    "bad-yaml": (
        "- id: x\n  part: [1\n",
        r"claims\.yaml: not valid YAML at line \d+",
    ),
    "not-a-list": ("id: kv-int8\n", "must be a non-empty list of claims, got dict"),
    "empty": ("", "must be a non-empty list of claims, got NoneType"),
    "duplicate": (GOOD + GOOD, "claim 'kv-int8': field 'id': duplicate id"),
    "unknown-op": (
        GOOD.replace('op: ">="', 'op: "=>"'),
        r"claim 'kv-int8': field 'prediction\[0\]\.op': Input should be '>=', '>', '<=' or '<'",
    ),
    "confidence-one": (
        GOOD.replace("0.8", "1.0"),
        "claim 'kv-int8': field 'confidence': must be strictly between 0 and 1, got 1.0",
    ),
    "confidence-zero": (
        GOOD.replace("0.8", "0"),
        "claim 'kv-int8': field 'confidence': must be strictly between 0 and 1",
    ),
    "confidence-negative": (
        GOOD.replace("0.8", "-0.2"),
        "claim 'kv-int8': field 'confidence': must be strictly between 0 and 1",
    ),
    "no-metric": (
        GOOD.replace("metric: capacity_ratio, ", ""),
        r"claim 'kv-int8': field 'prediction\[0\]\.metric': Field required",
    ),
    "empty-prediction": (
        GOOD.replace('    - {metric: capacity_ratio, op: ">=", value: 1.9}\n', "").replace(
            "prediction:", "prediction: []"
        ),
        "claim 'kv-int8': field 'prediction'",
    ),
    "missing-experiment": (
        GOOD + "  experiment: nowhere\n",
        "claim 'kv-int8': field 'experiment': experiments/nowhere.py does not exist",
    ),
    "bad-scope": (
        GOOD.replace("scope: any", "scope: gpu"),
        "claim 'kv-int8': field 'scope'",
    ),
    "unknown-field": (GOOD + "  colour: blue\n", "claim 'kv-int8': field 'colour'"),
    "bad-id": (GOOD.replace("id: kv-int8", "id: KV_int8"), "field 'id': must be kebab-case"),
    "unknown-profile": (
        GOOD + "  params: {huge: {}}\n",
        r"claim 'kv-int8': field 'params\.huge'",
    ),
    "entry-not-mapping": ("- just a string\n", "claim #1: must be a mapping, got str"),
    "unknown-model-class": (
        GOOD.replace("value: 1.9}", "value: 1.9, model_class: 9b}"),
        r"claim 'kv-int8': field 'prediction\[0\]\.model_class': must be one of",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_claims_file_is_one_line(tmp_path, case):
    text, pattern = BAD_CASES[case]
    write_claims(tmp_path, text)
    with pytest.raises(ClaimsError, match=pattern) as info:
        load_claims(tmp_path)
    assert "\n" not in str(info.value)


def test_missing_claims_file(tmp_path):
    with pytest.raises(ClaimsError, match="no claims.yaml in"):
        load_claims(tmp_path)


def test_named_experiment_that_exists(tmp_path):
    write_claims(tmp_path, GOOD + "  experiment: int8_capacity\n")
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "int8_capacity.py").write_text("def run(ctx):\n    pass\n")
    (claim,) = load_claims(tmp_path)
    assert claim.module_name == "int8_capacity"
    assert callable(registry.load_experiment(tmp_path, claim).run)


def test_experiment_without_run_is_rejected(tmp_path):
    write_claims(tmp_path, GOOD)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "kv_int8.py").write_text("VALUE = 1\n")
    (claim,) = load_claims(tmp_path)
    with pytest.raises(registry.ExperimentError, match="defines no run"):
        registry.load_experiment(tmp_path, claim)


def test_find_claim_unknown():
    with pytest.raises(ValueError, match="no claim 'nope'"):
        find_claim(load_claims(REPO), "nope")
