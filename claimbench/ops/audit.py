"""The audit log of `claimbench mcp`: one JSON line per tool call, allowed or refused, chained.

Each line carries ``sha``, the sha256 of its own canonical JSON (every field but ``sha``), and
``prev``, the previous line's ``sha`` (GENESIS on the first). Editing a line breaks its own
hash; deleting or inserting one breaks the next line's ``prev``; `claimbench audit --verify`
names the first line where either happens. Appends take an exclusive lock on the file, so
several servers (stdio and HTTP) may share one log without forking the chain.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GENESIS = "0" * 64
DEFAULT_LOG = Path(".audit") / "mcp.jsonl"  # under the project root, outside results/
REDACTED = "[redacted]"
# Argument names whose values are never written: no tool takes a secret today, and one that
# starts to must not leak it into a file kept forever.
_SECRET_NAME = re.compile(r"token|secret|password|passwd|api_?key|authori[sz]ation|bearer", re.I)
_TAIL_CHUNK_BYTES = 4096


def redact(value: Any) -> Any:
    """``value`` with the values of secret-named keys (at any depth) replaced by REDACTED."""
    if isinstance(value, dict):
        return {k: REDACTED if _SECRET_NAME.search(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def entry_sha(entry: dict[str, Any]) -> str:
    """The sha256 of an entry's canonical JSON, without its own ``sha`` field."""
    body = {k: v for k, v in entry.items() if k != "sha"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _last_line(f: Any) -> bytes | None:
    """The file's last non-empty line (read backwards from the end), or None when empty."""
    end = f.seek(0, os.SEEK_END)
    pos, tail = end, b""
    while pos > 0:
        step = min(_TAIL_CHUNK_BYTES, pos)
        pos -= step
        f.seek(pos)
        tail = f.read(step) + tail
        stripped = tail.rstrip(b"\n")
        if b"\n" in stripped:
            return stripped.rsplit(b"\n", 1)[1]
    stripped = tail.rstrip(b"\n")
    return stripped or None


def _sha_of_line(line: bytes) -> str:
    """A line's ``sha`` field; for a line that is not a chained entry, the hash of its bytes
    (the chain goes on, and --verify names that line)."""
    try:
        sha = json.loads(line).get("sha")
    except (ValueError, AttributeError):
        sha = None
    return sha if isinstance(sha, str) else hashlib.sha256(line).hexdigest()


class AuditLog:
    """An append-only, hash-chained JSON-lines file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        """Append ``record`` (plain JSON data) chained to the last line; return the entry."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "r+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            last = _last_line(f)
            entry = {**record, "prev": GENESIS if last is None else _sha_of_line(last)}
            entry["sha"] = entry_sha(entry)
            line = json.dumps(entry, separators=(",", ":"), default=str) + "\n"
            f.write(line.encode())
            f.flush()
            os.fsync(f.fileno())
        return entry


@dataclass(frozen=True)
class Verdict:
    """What --verify found: ok, or the first broken line (1-based) and why."""

    num_lines: int
    broken_line: int | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.broken_line is None


def read_lines(path: Path) -> list[bytes]:
    """The log's lines (without newlines); OSError if it cannot be read."""
    return [line for line in path.read_bytes().split(b"\n") if line]


def verify(path: Path) -> Verdict:
    """Walk the chain from the first line; stop at the first line that breaks it."""
    lines = read_lines(path)
    prev = GENESIS
    for number, line in enumerate(lines, start=1):
        try:
            entry = json.loads(line)
        except ValueError:
            return Verdict(len(lines), number, "not a JSON line")
        if not isinstance(entry, dict) or "sha" not in entry or "prev" not in entry:
            return Verdict(len(lines), number, "not an audit entry (no sha/prev)")
        if entry_sha(entry) != entry["sha"]:
            return Verdict(len(lines), number, "edited: its content does not match its sha")
        if entry["prev"] != prev:
            where = "the start" if number == 1 else f"line {number - 1}"
            return Verdict(
                len(lines),
                number,
                f"does not follow {where}: a line before it was deleted, inserted or edited",
            )
        prev = entry["sha"]
    return Verdict(len(lines))
