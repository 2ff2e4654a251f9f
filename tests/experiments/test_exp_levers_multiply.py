"""levers-multiply at tiny size: pool arithmetic once, analytic; four arms differing only in
the levers, one alive at a time; the additivity gap from the levers' measured costs."""

from __future__ import annotations

import pytest
from engine_tracking import builds_with_alive
from precision_helpers import (
    analytic_inputs,
    assert_claim_metrics_recorded,
    by_label,
    run_context,
    run_experiment,
    write_tiny_model,
)

PARAMS = {
    "num_windows": 2,
    "window_len": 32,
    "engine": {"kv_pool_bytes": 2**20, "max_num_seqs": 4, "max_num_batched_tokens": 64},
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def ctx(model_dir):
    return run_context("levers-multiply", PARAMS, model_dir)


@pytest.mark.slow
def test_multiply_ratio_is_pool_arithmetic_recorded_once(ctx):
    frame = ctx.measurements_frame("t")
    values = assert_claim_metrics_recorded("levers-multiply", frame)
    inputs = analytic_inputs(frame, "multiply_ratio")
    # Llama-3.1-8B: bf16 weights 16,060,522,496 B are half the budget; fp8 weights 8,037,058,560.
    assert inputs["hbm_bytes"] == 2 * 16_060_522_496
    assert inputs["weights"]["weight_bytes"] == 8_037_058_560
    for setting in ("base", "weights", "kv", "both"):
        pool = inputs[setting]
        assert pool["pool_bytes"] == inputs["hbm_bytes"] - pool["weight_bytes"]
    seqs = {s: inputs[s]["num_seqs"] for s in ("base", "weights", "kv", "both")}
    # Freed weight bytes and int8 pages both add sequences, and together add the most.
    assert seqs["base"] < min(seqs["weights"], seqs["kv"]) <= max(seqs["weights"], seqs["kv"])
    assert max(seqs["weights"], seqs["kv"]) < seqs["both"]
    gains = by_label(frame[frame["evidence"] == "analytic"], "capacity_gain")
    assert gains == {s: seqs[s] / seqs["base"] for s in ("weights", "kv", "both")}
    assert values["multiply_ratio"] == [gains["both"] / (gains["weights"] * gains["kv"])]


@pytest.mark.slow
def test_quality_arms_differ_only_in_the_levers(ctx):
    formats = {(c["weights"], c["kv_dtype"]) for c in ctx.engine_configs}
    assert formats == {("bf16", "bf16"), ("fp8", "bf16"), ("bf16", "int8"), ("fp8", "int8")}
    rest = [
        {k: v for k, v in c.items() if k not in ("weights", "kv_dtype")} for c in ctx.engine_configs
    ]
    assert all(r == rest[0] for r in rest)


@pytest.mark.slow
def test_gap_is_the_combined_cost_over_the_sum_of_the_measured_ones(ctx):
    frame = ctx.measurements_frame("t")
    for trial in range(2):
        rows = frame[frame["trial"] == trial]
        delta = by_label(rows, "lever_ppl_delta_pct")
        # Each lever really changed the model's numbers, so the sum is of two real costs.
        assert delta["weights"] != 0 and delta["kv"] != 0 and delta["both"] != 0
        gap = rows[rows["metric"] == "ppl_additivity_gap_pct"]["value"].item()
        assert gap == pytest.approx(delta["both"] - (delta["weights"] + delta["kv"]))


@pytest.mark.slow
def test_weight_share_must_leave_room(tmp_path):
    with pytest.raises(ValueError, match="weight_share"):
        run_experiment("levers-multiply", {**PARAMS, "weight_share": 1.0}, tmp_path)


@pytest.mark.slow
def test_never_holds_two_engines(model_dir, monkeypatch):
    """Each of the four engines is freed before the next is built."""
    built = builds_with_alive("levers-multiply", PARAMS, model_dir, monkeypatch)
    assert [alive for _, alive in built] == [0, 0, 0, 0]
    formats = sorted((options["weights"], options["kv_dtype"]) for options, _ in built)
    assert formats == [("bf16", "bf16"), ("bf16", "int8"), ("fp8", "bf16"), ("fp8", "int8")]
