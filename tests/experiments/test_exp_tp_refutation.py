"""tp-refutation at tiny size: one engine per tp over 4 virtual CPU devices (a subprocess:
the device count must precede JAX's backend start), the ratios computed from the measured
TPOTs, the roofline's ratios once per chip as analytic context."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from claimbench.hardware.chips import get_chip
from claimbench.hardware.model_presets import get_preset
from claimbench.hardware.roofline import ServingSetup, decode_step

WORKER = Path(__file__).resolve().parents[1] / "sharding_worker.py"


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("tp")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, str(WORKER), "experiment", str(work)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for row in out["rows"]:
        row["labels"] = json.loads(row["labels"])
    return out


def values(result: dict, metric: str) -> list[dict]:
    return [r for r in result["rows"] if r["metric"] == metric]


@pytest.mark.slow
def test_ratios_are_the_measured_tpots_ratios(result) -> None:
    tpot = {(r["trial"], r["labels"]["tp"]): r["value"] for r in values(result, "decode_tpot_ms")}
    assert sorted(tpot) == [(t, tp) for t in (0, 1) for tp in (1, 2, 4)]
    assert all(v > 0 for v in tpot.values())
    for row in values(result, "latency_ratio"):
        assert row["evidence"] == "cpu" and row["labels"]["tp"] == 4
        assert row["value"] == pytest.approx(tpot[(row["trial"], 1)] / tpot[(row["trial"], 4)])
    for row in values(result, "per_chip_throughput_ratio"):
        t = row["trial"]
        assert row["value"] == pytest.approx(tpot[(t, 1)] / (4 * tpot[(t, 4)]))
    rows = values(result, "per_chip_tokens_per_s")
    per_chip = {(r["trial"], r["labels"]["tp"]): r["value"] for r in rows}
    for (t, tp), ms in tpot.items():
        assert per_chip[(t, tp)] == pytest.approx(4 / (ms / 1000 * tp))  # batch 4


@pytest.mark.slow
def test_every_tp_served_the_whole_batch_each_trial(result) -> None:
    pairs = [tuple(p) for p in result["request_frames"]]
    assert pairs == [(tp, t) for tp in (1, 2, 4) for t in (0, 1)]
    assert result["num_requests"] == 3 * 2 * 4


@pytest.mark.slow
@pytest.mark.parametrize("chip", ["v5e", "v6e"])
def test_roofline_context_is_analytic_once_per_chip(result, chip) -> None:
    def of_chip(metric: str) -> list[dict]:
        return [r for r in values(result, metric) if r["labels"]["chip"] == chip]

    latency = of_chip("roofline_latency_ratio")
    per_chip = of_chip("roofline_per_chip_throughput_ratio")
    assert len(latency) == len(per_chip) == 1
    assert latency[0]["evidence"] == "analytic"
    shape, spec = get_preset("llama-3.1-8b"), get_chip(chip)
    one = decode_step(ServingSetup(shape, spec, 1, batch=4, context=4096, include_ici=True))
    four = decode_step(ServingSetup(shape, spec, 4, batch=4, context=4096, include_ici=True))
    assert latency[0]["value"] == pytest.approx(one.step_s / four.step_s)
    assert per_chip[0]["value"] == pytest.approx(one.step_s / (4 * four.step_s))
    # Four chips read a quarter of the bytes each but add all-reduces: faster, never 4x.
    assert 1 < latency[0]["value"] < 4


@pytest.mark.slow
def test_figure_plots_the_measured_rows(result, tmp_path) -> None:
    import pandas as pd

    from tests.tenant_exp_helpers import experiment

    figures = experiment("tp-refutation").figures
    assert figures([tmp_path / "no-run"]) == []
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rows = [{**r, "labels": json.dumps(r["labels"])} for r in result["rows"]]
    pd.DataFrame(rows).to_parquet(run_dir / "measurements.parquet")
    [(title, svg)] = figures([run_dir])
    assert "per-chip" in title and svg.startswith("<svg")


def test_tps_without_one_is_rejected(tmp_path) -> None:
    from claimbench.harness.context import RunContext
    from tests.tenant_exp_helpers import experiment

    ctx = RunContext(
        claim_id="tp-refutation",
        profile="quick",
        params={"tps": [2, 4]},
        trials=1,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="float32",
        model_option=tmp_path,
    )
    with pytest.raises(ValueError, match=r"tps must include 1 and a larger tp, got \[2, 4\]"):
        experiment("tp-refutation").run(ctx)
