"""Secrets reach `serve` and `mcp` from a file or the environment, never from argv."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, invoke

from claimbench.cli.secret_options import METRICS_KEY_ENV_VAR, read_secret


def test_a_secret_comes_from_its_file_else_the_environment(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "metrics.key"
    path.write_text("cb-from-file\n")
    monkeypatch.setenv(METRICS_KEY_ENV_VAR, "cb-from-env")
    assert read_secret(path, METRICS_KEY_ENV_VAR, "--metrics-key-file") == "cb-from-file"
    assert read_secret(None, METRICS_KEY_ENV_VAR, "--metrics-key-file") == "cb-from-env"
    monkeypatch.delenv(METRICS_KEY_ENV_VAR)
    assert read_secret(None, METRICS_KEY_ENV_VAR, "--metrics-key-file") is None
    path.write_text("\n")
    with pytest.raises(ValueError, match="--metrics-key-file .* is empty"):
        read_secret(path, METRICS_KEY_ENV_VAR, "--metrics-key-file")
    with pytest.raises(ValueError, match="cannot read it"):
        read_secret(tmp_path / "none", METRICS_KEY_ENV_VAR, "--metrics-key-file")


@pytest.mark.parametrize("command", ["serve", "mcp"])
def test_the_metrics_key_is_not_a_command_line_flag(command: str) -> None:
    result = invoke(command, "--metrics-key", "cb-visible-in-ps")
    assert result.exit_code == 2 and "No such option" in result.output


def test_mcp_names_an_unreadable_metrics_key_file(tmp_path: Path) -> None:
    agents = tmp_path / "agents.yaml"
    invoke("agents", "add", "ops", "--file", str(agents))
    result = invoke(
        "mcp", "--agents", str(agents), "--metrics-key-file", str(tmp_path / "missing.key")
    )
    assert_one_line_error(result, "--metrics-key-file")
