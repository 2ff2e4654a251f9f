"""The audit log of `claimbench mcp`: one JSON line per tool call, allowed or refused, chained.

Each line carries ``sha``, the sha256 of its own canonical JSON (every field but ``sha``), and
``prev``, the previous line's ``sha`` (GENESIS on the first). Editing a line breaks its own
hash; deleting or inserting one breaks the next line's ``prev``. A chain alone cannot tell that
its last lines were cut off, so each append also records the line count and last hash in a
head file beside the log (``mcp.jsonl.head``). `claimbench audit --verify` names the first line
where any of these breaks. Appends take an exclusive lock on the log, so several servers (stdio
and HTTP) may share one log without forking the chain.
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

from claimbench.platform.files import replace_text

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
            data = line.encode()
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            self._write_head(f.tell(), len(data), entry["sha"])
        return entry

    def _write_head(self, size_bytes: int, line_bytes: int, sha: str) -> None:
        """Record the chain's end (under the log's lock): replaced whole, never half written.
        Counting lines from the size would read the whole log per call; the head is updated
        from the previous head instead, or counted once when it is missing or stale."""
        head = read_head(self.path)
        if head is not None and head.get("size_bytes") == size_bytes - line_bytes:
            num_lines = int(head["num_lines"]) + 1
        else:
            num_lines = len(read_lines(self.path))
        record = {"num_lines": num_lines, "sha": sha, "size_bytes": size_bytes}
        replace_text(head_path(self.path), json.dumps(record), new_mode=0o600)  # as the log


def head_path(log: Path) -> Path:
    return log.with_name(log.name + ".head")


def read_head(log: Path) -> dict[str, Any] | None:
    """The head file's record, or None when it is missing or unreadable."""
    try:
        head = json.loads(head_path(log).read_text())
    except (OSError, ValueError):
        return None
    return head if isinstance(head, dict) and isinstance(head.get("num_lines"), int) else None


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
    return _check_head(path, lines)


def _check_head(path: Path, lines: list[bytes]) -> Verdict:
    """The intact chain against the head: as long as it records, ending at its hash. A head
    behind the log by some lines is a crash between an append and its head update."""
    num = len(lines)
    head = read_head(path)
    if head is None:
        if not lines:
            return Verdict(0)
        return Verdict(num, num, f"{head_path(path).name} is missing: the end cannot be checked")
    recorded = head["num_lines"]
    if recorded > num:
        return Verdict(
            num, num + 1, f"deleted: the log ends at line {num}, its head records {recorded}"
        )
    if recorded and json.loads(lines[recorded - 1]).get("sha") != head.get("sha"):
        return Verdict(num, recorded, "does not end the chain its head records (rewritten)")
    return Verdict(num)
