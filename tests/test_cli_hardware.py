"""`claimbench env` and `claimbench roofline` through the Typer app."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from claimbench.cli.main import app

runner = CliRunner()

BOOK_ARGS = [
    "roofline",
    "--model",
    "llama-3-70b",
    "--chip",
    "v5e",
    "--chips",
    "8",
    "--batch",
    "32",
    "--context",
    "8192",
    "--weights",
    "int8",
    "--kv",
    "int8",
]


def test_env_table():
    result = runner.invoke(app, ["env"])
    assert result.exit_code == 0, result.output
    assert "platform" in result.output
    assert "cpu" in result.output
    assert "jax version" in result.output


def test_env_json():
    result = runner.invoke(app, ["env", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["platform"] == "cpu"
    assert info["chip"] is None and info["chip_spec"] is None
    assert info["price_per_hour"] is None
    assert info["device_count"] >= 1


def test_roofline_table():
    result = runner.invoke(app, BOOK_ARGS)
    assert result.exit_code == 0, result.output
    assert "step time (ms)" in result.output
    assert "17.32" in result.output  # the Scaling Book's ~17 ms
    assert "memory" in result.output


def test_roofline_json():
    result = runner.invoke(app, [*BOOK_ARGS, "--json", "--ici"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["inputs"]["chips"] == 8 and out["inputs"]["ici"] is True
    est = out["estimate"]
    assert est["step_s"] == pytest.approx(17e-3, rel=0.10)
    assert est["tokens_per_s_per_chip"] == pytest.approx(235, rel=0.10)
    assert est["ici_s"] > 0
    assert est["max_batch"] == 33


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "gpt-2"], "--model 'gpt-2' is not one of"),
        (["--chip", "v4"], "--chip 'v4' is not one of"),
        (["--weights", "fp4"], "--weights 'fp4' is not one of"),
        (["--kv", "f32"], "--kv 'f32' is not one of"),
        (["--chips", "0"], "--chips must be > 0, got 0"),
        (["--batch", "-3"], "--batch must be > 0, got -3"),
        (["--context", "0"], "--context must be > 0, got 0"),
        (["--reserve", "1.5"], "--reserve must be in [0, 1), got 1.5"),
        (["--compute", "fp8"], "TPU v5e has no published fp8 peak"),
    ],
)
def test_roofline_bad_input(args, message):
    result = runner.invoke(app, ["roofline", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_roofline_tiny_model():
    result = runner.invoke(app, ["roofline", "--model", "claimbench-tiny", "--chip", "h200"])
    assert result.exit_code == 0, result.output
    assert "claimbench-tiny on 1 x h200" in result.output
