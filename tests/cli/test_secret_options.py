"""Secrets reach `serve` and `mcp` from a file or the environment, never from argv."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, invoke

from claimbench.cli.admin.secret_options import (
    API_KEY_ENV_VAR,
    METRICS_KEY_ENV_VAR,
    read_secret,
    read_secret_list,
)


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


def test_bench_takes_api_keys_from_a_file_or_the_environment(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "api.keys"
    path.write_text("alice=cb-a\n\nbob=cb-b\n")
    assert read_secret_list(path, API_KEY_ENV_VAR, "--api-key-file") == ["alice=cb-a", "bob=cb-b"]
    monkeypatch.setenv(API_KEY_ENV_VAR, "alice=cb-a, bob=cb-b")
    assert read_secret_list(None, API_KEY_ENV_VAR, "--api-key-file") == ["alice=cb-a", "bob=cb-b"]
    path.write_text("\n")
    with pytest.raises(ValueError, match="--api-key-file .* is empty"):
        read_secret_list(path, API_KEY_ENV_VAR, "--api-key-file")
    result = invoke("bench", "--url", "http://127.0.0.1:9", "--api-key", "cb-visible-in-ps")
    assert result.exit_code == 2 and "No such option" in result.output


def test_tenants_list_escapes_control_characters_in_names(tmp_path: Path) -> None:
    file = tmp_path / "tenants.yaml"
    file.write_text(f'tenants:\n  - name: "ev\\e[2Kil\\r"\n    key_sha256: ["{"0" * 64}"]\n')
    result = invoke("tenants", "list", "--file", str(file))
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout and "\r" not in result.stdout
    assert "ev\\x1b[2Kil\\r" in result.stdout
