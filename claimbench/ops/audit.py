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

from claimbench.ops.audit_key import HEAD, LINE, canonical, mac, mac_ok
from claimbench.platform.files import replace_text
from claimbench.platform.regular_file import open_regular, read_fd, read_regular

GENESIS = "0" * 64
DEFAULT_LOG = Path(".audit") / "mcp.jsonl"  # under the project root, outside results/
REDACTED = "[redacted]"
# Argument names whose values are never written: no tool takes a secret today, and one that
# starts to must not leak it into a file kept forever. A count of tokens ("max_tokens",
# "max_num_batched_tokens") or a tokenizer is no secret: redacting it would hide what an
# agent asked for, so "token" followed by "s" or "iz" is not a secret's name.
_SECRET_NAME = re.compile(
    r"token(?!s|iz)|secret|password|passwd|pass_?phrase|credential|api_?key|(?:^|[_-])key$"
    r"|authori[sz]ation|bearer|cookie",
    re.I,
)
_TAIL_CHUNK_BYTES = 4096
# Bounds on what is parsed from a file others may write: a line (the guard caps what a call
# logs far below this) and the objects/arrays in it (our lines hold a handful).
MAX_LINE_BYTES = 64 * 1024
MAX_CONTAINERS = 64
MAX_LOG_BYTES = 1 << 30
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
CHAIN_FIELDS = ("log", "seq", "prev", "fault", "mac")


def is_secret_name(name: Any) -> bool:
    """Whether an argument named ``name`` holds a secret (its value is never logged)."""
    return bool(_SECRET_NAME.search(str(name)))


def redact(value: Any) -> Any:
    """``value`` with the values of secret-named keys (at any depth) replaced by REDACTED."""
    if isinstance(value, dict):
        return {k: REDACTED if _SECRET_NAME.search(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a key appears twice")
    return dict(pairs)


def decode_record(line: bytes) -> dict[str, Any]:
    """The JSON object on ``line``, parsed only within bounds (ValueError naming what is wrong):
    at most MAX_LINE_BYTES, at most MAX_CONTAINERS objects and arrays outside strings (a line
    of 100,000 '[' must not exhaust the parser's stack), no key twice."""
    if len(line) > MAX_LINE_BYTES:
        raise ValueError(f"{len(line)} bytes, more than the {MAX_LINE_BYTES} a line may hold")
    bare = _JSON_STRING.sub(b"", line)
    containers = bare.count(b"[") + bare.count(b"{")
    if containers > MAX_CONTAINERS:
        raise ValueError(f"{containers} nested objects/arrays, more than {MAX_CONTAINERS}")
    try:
        record = json.loads(line, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"not JSON ({e})") from None
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    return record


def canonical_line(record: dict[str, Any]) -> bytes:
    """The bytes a record takes in the log: its canonical JSON and a newline."""
    return (canonical(record) + "\n").encode("ascii")


def parse_entry(key: bytes, line: bytes) -> dict[str, Any] | None:
    """The line as a chained entry, in its canonical bytes, whose MAC holds; else None."""
    try:
        entry = decode_record(line)
    except ValueError:
        return None
    if not isinstance(entry.get("seq"), int) or canonical_line(entry) != line + b"\n":
        return None
    return entry if mac_ok(key, LINE, entry) else None


def _last_line(fd: int) -> bytes | None:
    """The file's last line (read backwards from the end, at most MAX_LINE_BYTES + 1 of it:
    a longer one is invalid anyway), or None when empty."""
    end = os.fstat(fd).st_size
    pos, tail = end, b""
    while pos > 0 and len(tail) <= MAX_LINE_BYTES + 1:
        step = min(_TAIL_CHUNK_BYTES, pos)
        pos -= step
        tail = os.pread(fd, step, pos) + tail
        stripped = tail.rstrip(b"\n")
        if b"\n" in stripped:
            return stripped.rsplit(b"\n", 1)[1]
    stripped = tail.rstrip(b"\n")
    return stripped or None


def _count_lines(fd: int) -> int:
    count, pos = 0, 0
    while chunk := os.pread(fd, 1 << 20, pos):
        count += chunk.count(b"\n")
        pos += len(chunk)
    return count


def head_path(log: Path) -> Path:
    return log.with_name(log.name + ".head")


def parse_head(data: bytes | None) -> tuple[dict[str, Any] | None, str]:
    """The head record in ``data`` (its MAC not checked) and "" ; (None, "") when there is no
    head; (None, what is wrong) when it is not a head."""
    if data is None:
        return None, ""
    try:
        head = decode_record(data.rstrip(b"\n"))
    except ValueError as e:
        return None, f"the head is unreadable: {e}"
    if not isinstance(head.get("num_lines"), int):
        return None, "the head records no line count"
    return head, ""


def read_head_bytes(log: Path) -> bytes | None:
    """The head file's bytes, None when it is missing. ValueError when it is not a regular
    file (a FIFO must not block the lock's holder) or too big; OSError when unreadable."""
    try:
        return read_regular(head_path(log), MAX_LINE_BYTES)
    except FileNotFoundError:
        return None


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
        fd = open_regular(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            last = _last_line(fd)
            entry = parse_entry(self._key, last) if last is not None else None
            try:
                head, head_problem = parse_head(read_head_bytes(self.path))
            except ValueError as e:
                head, head_problem = None, f"the head is unreadable: {e}"
            fault = head_problem or _head_fault(self._key, last, entry, head)
            chain = self._chain_from(entry, head, last, fd)
            new = {**record, **chain}
            if fault:
                new["fault"] = fault
            new["mac"] = mac(self._key, LINE, new)
            line = canonical_line(new)
            if len(line) > MAX_LINE_BYTES + 1:
                raise ValueError(f"an audit line of {len(line)} bytes: at most {MAX_LINE_BYTES}")
            os.write(fd, line)
            os.fsync(fd)
            self._write_head(new)
        finally:
            os.close(fd)  # releases the lock
        return new

    def _chain_from(
        self, entry: dict | None, head: dict | None, last: bytes | None, fd: int
    ) -> dict:
        """The log id, number and previous MAC a new line takes: from the last line when it
        is a valid entry, else from a valid head (an emptied log), else a new chain."""
        if entry is not None:
            return {"log": entry["log"], "seq": entry["seq"] + 1, "prev": entry["mac"]}
        if head is not None and mac_ok(self._key, HEAD, head):
            return {"log": head["log"], "seq": head["num_lines"] + 1, "prev": head["last_mac"]}
        seq = 1 if last is None else _count_lines(fd) + 1
        return {"log": secrets.token_hex(8), "seq": seq, "prev": GENESIS}

    def _write_head(self, entry: dict[str, Any]) -> None:
        """Record the chain's end (under the log's lock): replaced whole, never half written."""
        head = {"log": entry["log"], "num_lines": entry["seq"], "last_mac": entry["mac"]}
        head["mac"] = mac(self._key, HEAD, head)
        replace_text(head_path(self.path), canonical(head) + "\n", new_mode=0o600)  # as the log


def read_log(path: Path) -> bytes:
    """The whole log, read under a shared lock (never between an append and its head);
    ValueError when it is not a regular file, OSError when unreadable."""
    fd = open_regular(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        return read_fd(fd, MAX_LOG_BYTES, path)
    finally:
        os.close(fd)


def read_lines(path: Path) -> list[bytes]:
    """The log's non-empty lines (without newlines), for display; see read_log."""
    return [line for line in read_log(path).split(b"\n") if line]
