"""The audit log of `claimbench mcp`: one JSON line per tool call, allowed or refused, each
line keyed and chained.

Each line carries ``log`` (a random id fixed by the first line), ``seq`` (its 1-based number),
``prev`` (the previous line's ``mac``; GENESIS on the first) and ``mac``, the HMAC-SHA256 of
everything else under the audit key (ops/audit_key.py), which the MCP server holds and agents
cannot read. Without the key no line can be added, edited, re-numbered or re-chained. The
last lines cannot be cut off unseen either: each append also writes a head beside the log
(``mcp.jsonl.head``: the log id, line count and last line's MAC, itself MACed), and an append
that finds the head missing, forged, or not naming the log's last line says so in its own
keyed line (``fault``), so what an intruder did before is kept as evidence.

What the head cannot show, a log and head both rolled back to an older copy, a signed
checkpoint kept outside the log's directory does (ops/audit_verify.py). Appends take an
exclusive lock on the log, so several servers (stdio and HTTP) may share one log.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

from claimbench.ops.audit_key import HEAD, LINE, mac, mac_ok
from claimbench.platform.files import replace_text

GENESIS = "0" * 64
DEFAULT_LOG = Path(".audit") / "mcp.jsonl"  # under the project root, outside results/
REDACTED = "[redacted]"
# Argument names whose values are never written: no tool takes a secret today, and one that
# starts to must not leak it into a file kept forever.
_SECRET_NAME = re.compile(r"token|secret|password|passwd|api_?key|authori[sz]ation|bearer", re.I)
_TAIL_CHUNK_BYTES = 4096
CHAIN_FIELDS = ("log", "seq", "prev", "fault", "mac")


def redact(value: Any) -> Any:
    """``value`` with the values of secret-named keys (at any depth) replaced by REDACTED."""
    if isinstance(value, dict):
        return {k: REDACTED if _SECRET_NAME.search(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


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


def parse_entry(key: bytes, line: bytes) -> dict[str, Any] | None:
    """The line as a chained entry whose MAC holds, else None."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("seq"), int):
        return None
    return entry if mac_ok(key, LINE, entry) else None


def head_path(log: Path) -> Path:
    return log.with_name(log.name + ".head")


def read_head(log: Path) -> dict[str, Any] | None:
    """The head file's record as stored (its MAC not checked), or None when missing/unreadable."""
    try:
        head = json.loads(head_path(log).read_text())
    except (OSError, ValueError):
        return None
    return head if isinstance(head, dict) else None


def _head_fault(key: bytes, last: bytes | None, entry: dict | None, head: dict | None) -> str:
    """What is wrong between the log's end and its head before an append ("" when nothing)."""
    if head is None:
        return "" if last is None else "the head was missing"
    if not mac_ok(key, HEAD, head):
        return "the head's MAC did not match (edited, or written without the key)"
    if last is None:
        return f"the log was empty, its head recorded {head.get('num_lines')} line(s)"
    if entry is None:
        return "the log's last line was not a valid keyed entry"
    if (head.get("log"), head.get("num_lines"), head.get("last_mac")) != (
        entry["log"],
        entry["seq"],
        entry["mac"],
    ):
        return (
            f"the head recorded {head.get('num_lines')} line(s), "
            f"the log ended at line {entry['seq']}"
        )
    return ""


class AuditLog:
    """An append-only, keyed, chained JSON-lines file."""

    def __init__(self, path: Path, key: bytes) -> None:
        self.path = path
        self._key = key

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        """Append ``record`` (plain JSON data, none of CHAIN_FIELDS) chained to the last line;
        return the entry."""
        clash = sorted(set(record) & set(CHAIN_FIELDS))
        if clash:
            raise ValueError(f"an audit record may not set {clash}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "r+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            last = _last_line(f)
            entry = parse_entry(self._key, last) if last is not None else None
            head = read_head(self.path)
            fault = _head_fault(self._key, last, entry, head)
            chain = self._chain_from(entry, head, last)
            new = {**record, **chain}
            if fault:
                new["fault"] = fault
            new["mac"] = mac(self._key, LINE, new)
            f.write((json.dumps(new, separators=(",", ":"), default=str) + "\n").encode())
            f.flush()
            os.fsync(f.fileno())
            self._write_head(new)
        return new

    def _chain_from(self, entry: dict | None, head: dict | None, last: bytes | None) -> dict:
        """The log id, number and previous MAC a new line takes: from the last line when it
        is a valid entry, else from a valid head (an emptied log), else a new chain."""
        if entry is not None:
            return {"log": entry["log"], "seq": entry["seq"] + 1, "prev": entry["mac"]}
        if head is not None and mac_ok(self._key, HEAD, head):
            return {"log": head["log"], "seq": head["num_lines"] + 1, "prev": head["last_mac"]}
        seq = 1 if last is None else len(read_lines(self.path)) + 1
        return {"log": secrets.token_hex(8), "seq": seq, "prev": GENESIS}

    def _write_head(self, entry: dict[str, Any]) -> None:
        """Record the chain's end (under the log's lock): replaced whole, never half written."""
        head = {"log": entry["log"], "num_lines": entry["seq"], "last_mac": entry["mac"]}
        head["mac"] = mac(self._key, HEAD, head)
        replace_text(head_path(self.path), json.dumps(head), new_mode=0o600)  # as the log


def read_lines(path: Path) -> list[bytes]:
    """The log's lines (without newlines); OSError if it cannot be read."""
    return [line for line in path.read_bytes().split(b"\n") if line]
