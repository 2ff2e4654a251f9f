"""Agents of `claimbench mcp`: agents.yaml, each agent's scopes and the sha256 of its token.

agents:
  - name: nightly-bot
    scopes: [read, check, run]        # ops/scopes.py; default [read]
    token_sha256: 9f86d0...           # sha256 hex of the token (the token is never stored)
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass
from pathlib import Path

from claimbench.ops.scopes import DEFAULT_SCOPES, check_scopes
from claimbench.platform.hashed_key_file import SHA256_HEX, add_entry, hash_secret, read_entries

TOKEN_PREFIX = "cba-"
TOKEN_ENV_VAR = "CLAIMBENCH_AGENT_TOKEN"  # the agent's token over stdio
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


hash_token = hash_secret


@dataclass(frozen=True)
class Agent:
    """One declared agent."""

    name: str
    scopes: tuple[str, ...]
    token_sha256: str


class Agents:
    """The agents of an agents file."""

    def __init__(self, agents: list[Agent]) -> None:
        self.agents = agents  # in file order

    def agent_for(self, token: str | None) -> Agent | None:
        """The agent whose token this is, or None (no token, or an unknown one)."""
        if not token:
            return None
        digest = hash_token(token)
        # Constant-time compare: the time to refuse a token says nothing about the stored hashes.
        found = [a for a in self.agents if hmac.compare_digest(a.token_sha256, digest)]
        return found[0] if found else None

    @classmethod
    def load(cls, path: Path) -> Agents:
        """Read and validate an agents file; ValueError naming the file and the problem."""
        return cls.from_entries(path, read_entries(path, "agents", "agents file"))

    @classmethod
    def from_entries(cls, path: Path, entries: list) -> Agents:
        """Validate an agents file's entries (``path`` names it in errors)."""
        agents: list[Agent] = []
        for entry in entries:
            agent = _parse_entry(path, entry)
            if any(a.name == agent.name for a in agents):
                raise ValueError(f"{path}: agent {agent.name!r} appears twice")
            if any(a.token_sha256 == agent.token_sha256 for a in agents):
                raise ValueError(f"{path}: agent {agent.name!r} shares a token with another agent")
            agents.append(agent)
        if not agents:
            raise ValueError(f"{path}: no agents")
        return cls(agents)


def add_agent(path: Path, name: str, scopes: list[str] | None) -> str:
    """Add agent ``name`` with ``scopes`` (None: read only) and a new token to ``path`` (created
    if missing); returns the token. ValueError if the agent exists, a scope is unknown or the
    file is malformed; the file is then untouched. Safe to call from several processes at once."""

    def build(digest: str) -> dict[str, object]:
        return {"name": name, "scopes": list(scopes or DEFAULT_SCOPES), "token_sha256": digest}

    return add_entry(
        path,
        "agents",
        "agents file",
        noun="agent",
        name=name,
        prefix=TOKEN_PREFIX,
        build=build,
        check=lambda entries: Agents.from_entries(path, entries),
    )


def _parse_entry(path: Path, entry: object) -> Agent:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise ValueError(f"{path}: every agent needs a 'name', got {entry!r}")
    name = entry["name"]
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"{path}: agent name {name!r} must be 1-64 letters, digits, '_', '.' or '-'"
        )
    unknown = sorted(set(entry) - {"name", "scopes", "token_sha256"})
    if unknown:
        raise ValueError(f"{path}: agent {name!r} has unknown fields {unknown}")
    digest = entry.get("token_sha256")
    if not isinstance(digest, str) or not SHA256_HEX.fullmatch(digest):
        raise ValueError(f"{path}: agent {name!r} token_sha256 must be sha256 hex, got {digest!r}")
    scopes = check_scopes(entry.get("scopes", list(DEFAULT_SCOPES)), f"{path}: agent {name!r}")
    return Agent(name, scopes, digest)
