"""`serve` and `bench --batch-invariant`: refused in one line, exit 2, where it cannot hold."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from claimbench.cli.main import app


@pytest.mark.parametrize("command", ["bench", "serve"])
def test_cli_refuses_the_mode_where_it_cannot_hold_in_one_line(command):
    args = [command, "--batch-invariant", "--weights", "int8"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "batch-invariant" in result.output or "batch_invariant" in result.output
    assert "int8" in result.output and "Traceback" not in result.output
