"""What would decide a claim, and why its evidence only indicates it: the hardware scope, or the
model class of a condition."""

from __future__ import annotations

from scoring_helpers import claim, rows, store_run

from claimbench.harness import deciding, scoring

TINY = {
    "model": {
        "name": "tiny",
        "architecture": {"num_params": 4_400_000},
        "weights_sha256": {"model.safetensors": "a" * 64},
    }
}


def test_a_model_class_claim_names_hardware_model_class_and_command():
    c = claim(
        scope="accelerator",
        conditions=[{"metric": "speedup", "op": ">=", "value": 1.5, "model_class": "8b"}],
    )
    d = deciding.what_decides(c)
    assert (d.hardware, d.model_classes) == (("tpu", "gpu"), ("8b",))
    assert d.command.startswith(f"claimbench run --claim {c.id} --profile full --model")
    text = d.describe()
    assert "tpu or gpu hardware" in text and "8b class" in text and d.command in text
    plain = deciding.what_decides(claim(scope="any"))
    assert plain.model_classes == () and "any model" in plain.describe()


def test_an_in_scope_run_of_a_tiny_model_is_indicative_for_its_model_class(tmp_path):
    # Scope any, cpu in scope: only the model class keeps the run from deciding.
    c = claim(
        scope="any",
        conditions=[{"metric": "ppl_delta_pct", "op": "<=", "value": 1.0, "model_class": "8b"}],
    )
    run = store_run(tmp_path, c, rows("ppl_delta_pct", [0.1, 0.2, 0.3], unit="%"), extra_meta=TINY)
    score = scoring.score_claim(c, [run])
    assert score.verdict == "indicative-only"
    reason = deciding.indicative_reason(score)
    assert "4.4M-parameter model" in reason and "8b class" in reason
    assert deciding.INDICATIVE_OUT_OF_SCOPE not in reason


def test_out_of_scope_hardware_is_the_reason_when_no_run_is_in_scope(tmp_path):
    c = claim(scope="tpu")
    run = store_run(tmp_path, c, rows("gain", [2.0, 2.1, 2.2]), extra_meta=TINY)
    score = scoring.score_claim(c, [run])
    assert score.verdict == "indicative-only"
    assert deciding.indicative_reason(score) == "cpu evidence, outside the claim's scope (tpu)"
