"""Agents of `claimbench mcp`: tokens shown once and stored as sha256, scopes checked, and a
bad agents file or token stops `claimbench mcp` at start-up with one line and exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from cli_helpers import assert_one_line_error, invoke

from claimbench.ops.agents import TOKEN_ENV_VAR, Agents, add_agent, hash_token


def test_add_stores_only_the_hash_and_the_default_scope_is_read(tmp_path: Path) -> None:
    path = tmp_path / "agents.yaml"
    token = add_agent(path, "reader", None)
    writer = add_agent(path, "writer", ["read", "run", "run"])
    assert token not in path.read_text() and hash_token(token) in path.read_text()
    agents = Agents.load(path)
    assert agents.agent_for(token).scopes == ("read",)
    assert agents.agent_for(writer).scopes == ("read", "run")
    assert agents.agent_for("cba-wrong") is None and agents.agent_for(None) is None
    assert path.stat().st_mode & 0o077 == 0


def test_a_symlink_planted_at_the_old_temp_name_is_not_followed(tmp_path: Path) -> None:
    path = tmp_path / "agents.yaml"
    add_agent(path, "reader", None)
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    (tmp_path / f".agents.yaml.tmp-{os.getpid()}").symlink_to(victim)  # the name used before
    add_agent(path, "writer", ["run"])
    assert victim.read_text() == "untouched"
    assert {a.name for a in Agents.load(path).agents} == {"reader", "writer"}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("agents: [", "not valid YAML at line 1"),
        ("\udcff", "is not UTF-8 text"),  # the byte 0xff
        ("- name: x", "must hold a mapping with an 'agents' list"),
        ("agents: []", "no agents"),
        ("agents: [{name: x, token_sha256: abc}]", "token_sha256 must be sha256 hex"),
        (f"agents: [{{name: x, scopes: [root], token_sha256: {'a' * 64}}}]", "unknown scope"),
        (f"agents: [{{name: x, role: admin, token_sha256: {'a' * 64}}}]", "unknown fields"),
        (f"agents: [{{name: 'a b', token_sha256: {'a' * 64}}}]", "agent name 'a b'"),
    ],
)
def test_malformed_agents_files_are_one_line(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "agents.yaml"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(ValueError, match=fragment):
        Agents.load(path)
    before = path.read_bytes()
    with pytest.raises(ValueError):
        add_agent(path, "new", None)
    assert path.read_bytes() == before  # a file the server would reject is not extended


def test_cli_add_prints_the_token_once_and_list_never_shows_it(tmp_path: Path) -> None:
    path = tmp_path / "agents.yaml"
    added = invoke("agents", "add", "ops", "--file", str(path), "--scope", "check")
    assert added.exit_code == 0, added.output
    token = added.stdout.strip()
    assert Agents.load(path).agent_for(token).name == "ops"
    listed = invoke("agents", "list", "--file", str(path))
    assert listed.stdout.strip() == "ops: check" and token not in listed.output
    again = invoke("agents", "add", "ops", "--file", str(path))
    assert_one_line_error(again, "agent 'ops' already exists")
    bad = invoke("agents", "add", "x", "--file", str(path), "--scope", "admin")
    assert_one_line_error(bad, "unknown scope 'admin'")
    assert [a["name"] for a in yaml.safe_load(path.read_text())["agents"]] == ["ops"]


def test_mcp_refuses_to_start_on_a_bad_file_or_token(
    project: Path, tmp_path: Path, monkeypatch
) -> None:
    path = tmp_path / "agents.yaml"
    root = ("--root", str(project))
    assert_one_line_error(invoke(*root, "mcp", "--agents", str(path)), "cannot read agents file")
    path.write_text("agents: {")
    assert_one_line_error(invoke(*root, "mcp", "--agents", str(path)), "not valid YAML")
    path.unlink()
    add_agent(path, "ops", None)
    monkeypatch.delenv(TOKEN_ENV_VAR, raising=False)
    unset = invoke(*root, "mcp", "--agents", str(path))
    assert_one_line_error(unset, f"{TOKEN_ENV_VAR} is not set")
    monkeypatch.setenv(TOKEN_ENV_VAR, "cba-wrong")
    wrong = invoke(*root, "mcp", "--agents", str(path))
    assert_one_line_error(wrong, "is not the token of any agent")
    inside = invoke(
        *root, "mcp", "--agents", str(path), "--audit-log", str(project / "results" / "a.jsonl")
    )
    assert_one_line_error(inside, "is inside results/")
    assert not (project / "results").exists()
    started = (project / ".audit" / "mcp.jsonl").read_text().splitlines()
    assert len(started) == 2 and all("refused: start over stdio" in line for line in started)


def test_mcp_over_http_refuses_a_place_it_cannot_listen_in_one_line(project, tmp_path) -> None:
    import socket

    path = tmp_path / "agents.yaml"
    add_agent(path, "ops", None)
    root = ("--root", str(project))
    bad_host = invoke(*root, "mcp", "--agents", str(path), "--http", "--host", "no.such.invalid")
    assert_one_line_error(bad_host, "--host 'no.such.invalid': ")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        in_use = invoke(*root, "mcp", "--agents", str(path), "--http", "--port", port)
    assert_one_line_error(in_use, f"cannot listen on 127.0.0.1:{port}: Address already in use")
