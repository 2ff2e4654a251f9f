"""`claimbench doctor`: the golden check offline, engine against a dense forward pass."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from claimbench.cli.main import app
from claimbench.serving.monitoring.health import GOLDEN_TOKENS

runner = CliRunner()


@pytest.mark.slow
def test_doctor_passes_on_the_shipped_model():
    result = runner.invoke(app, ["--dtype", "float32", "doctor", "--attention-backend", "xla"])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output
    engine_line = next(line for line in result.output.splitlines() if line.startswith("engine:"))
    assert engine_line.count(",") == GOLDEN_TOKENS - 1  # the token list was printed


@pytest.mark.slow
def test_doctor_names_a_bad_backend_in_one_line():
    result = runner.invoke(app, ["doctor", "--attention-backend", "gpu-magic"])
    assert result.exit_code == 2
    assert "attention_backend" in result.output and "Traceback" not in result.output
