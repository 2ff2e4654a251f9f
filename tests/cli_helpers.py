"""Invoking the CLI in process, and what a one-line error looks like (CLI and ops tests)."""

from __future__ import annotations

from typer.testing import CliRunner

from claimbench.cli.main import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def assert_one_line_error(result, fragment: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert fragment in lines[0]
