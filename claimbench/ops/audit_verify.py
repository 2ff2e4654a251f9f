"""Verifying the audit log (ops/audit.py) with its key, against its head and a checkpoint.

A checkpoint is the head as it was when the operator (or the nightly) last verified the log,
MACed under the audit key and kept outside the log's directory. The log must extend it: same
log id, at least as many lines, and the line the checkpoint names still there unchanged. That
catches what the head alone cannot: a log cut back together with its head to an older copy,
or replaced by another log's lines and head.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from claimbench.ops.audit import (
    GENESIS,
    MAX_LINE_BYTES,
    MAX_LOG_BYTES,
    canonical_line,
    decode_record,
    head_path,
    parse_head,
    read_head_bytes,
)
from claimbench.ops.audit_key import (
    CHECKPOINT,
    HEAD,
    LINE,
    canonical,
    check_outside,
    mac,
    mac_ok,
)
from claimbench.platform.file_lock import locked
from claimbench.platform.files import replace_text
from claimbench.platform.regular_file import open_regular, read_fd, read_regular


@dataclass(frozen=True)
class Verdict:
    """What verification found: ``problem`` is None when the log is intact."""

    num_lines: int
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def _walk(key: bytes, lines: list[bytes]) -> tuple[list[dict[str, Any]], str | None]:
    """The entries, and the first line that breaks the keyed chain (None when none does)."""
    entries: list[dict[str, Any]] = []
    prev = GENESIS
    for number, line in enumerate(lines, start=1):
        try:
            entry = decode_record(line)
        except ValueError as e:
            return entries, f"line {number}: not a JSON line: {e}"
        if not isinstance(entry.get("seq"), int):
            return entries, f"line {number}: not an audit entry (no log, seq, prev, mac)"
        if not mac_ok(key, LINE, entry):
            return entries, (
                f"line {number}: its MAC does not match (edited, written without the key, "
                "or under another key)"
            )
        if canonical_line(entry) != line + b"\n":
            return entries, (
                f"line {number}: not in its canonical bytes (spacing, key order, escapes, "
                "line ending or encoding changed): the MAC covers only those"
            )
        if entries and entry.get("log") != entries[0]["log"]:
            return entries, (
                f"line {number}: from another log (log id {entry.get('log')}, "
                f"this log's is {entries[0]['log']})"
            )
        seq = entry["seq"]
        if seq < number:
            return entries, (
                f"line {number}: carries number {seq}: a line repeated or moved back "
                "(duplicated, replayed or reordered)"
            )
        if seq > number:
            return entries, (
                f"line {number}: carries number {seq}: {seq - number} line(s) before it "
                "deleted, or lines reordered"
            )
        if entry.get("prev") != prev:
            return entries, f"line {number}: does not follow line {number - 1} (reordered)"
        if entry.get("fault"):
            return entries, f"line {number}: appended after tampering: {entry['fault']}"
        entries.append(entry)
        prev = entry["mac"]
    return entries, None


def _check_head(
    key: bytes, log: Path, head_bytes: bytes | None, entries: list[dict[str, Any]]
) -> str | None:
    """The intact chain against its head: the same log, as many lines, ending at its MAC."""
    name = head_path(log).name
    head, problem = parse_head(head_bytes)
    if problem:
        return f"{name}: {problem}"
    if head is None:
        if not entries:
            return (
                "no audit line and no head: nothing was logged, or the log and its head "
                "were removed (a checkpoint tells which)"
            )
        return f"{name} is missing: lines at the end may have been deleted"
    if not mac_ok(key, HEAD, head):
        return f"{name}: its MAC does not match (edited, or written without the key)"
    recorded = head.get("num_lines")
    if entries and head.get("log") != entries[0]["log"]:
        return f"{name} belongs to another log (log id {head.get('log')})"
    if recorded > len(entries):
        return f"the log ends at line {len(entries)}, its head records {recorded}: lines deleted"
    if recorded < len(entries):
        return (
            f"the head lags: it records {recorded} line(s), the log has {len(entries)} "
            "(a head restored from before, or a crash between an append and its head)"
        )
    if head.get("last_mac") != entries[-1]["mac"]:
        return f"{name} does not name the log's last line (rewritten)"
    return None


def read_checkpoint(key: bytes, checkpoint: Path) -> dict[str, Any]:
    """The checkpoint's record; ValueError when it is missing, unreadable or forged."""
    try:
        record = decode_record(read_regular(checkpoint, MAX_LINE_BYTES).rstrip(b"\n"))
    except FileNotFoundError:
        raise ValueError(f"checkpoint {checkpoint} is missing") from None
    except OSError as e:
        raise ValueError(f"cannot read checkpoint {checkpoint}: {e.strerror}") from None
    except ValueError as e:
        raise ValueError(f"cannot read checkpoint {checkpoint}: {e}") from None
    if not isinstance(record.get("num_lines"), int) or not mac_ok(key, CHECKPOINT, record):
        raise ValueError(f"checkpoint {checkpoint}: its MAC does not match (edited or forged)")
    return record


def _check_checkpoint(record: dict[str, Any], entries: list[dict[str, Any]]) -> str | None:
    """The log must extend the checkpoint: same log, the checkpoint's last line unchanged."""
    num = record.get("num_lines")
    if not entries or entries[0]["log"] != record.get("log"):
        return f"not the log the checkpoint of {record.get('time')} recorded (log {record['log']})"
    if num > len(entries):
        return (
            f"rolled back: the checkpoint of {record.get('time')} records {num} line(s), "
            f"the log has {len(entries)}"
        )
    if entries[num - 1]["mac"] != record.get("last_mac"):
        return f"line {num} is not the line the checkpoint of {record.get('time')} recorded"
    return None


def _snapshot(log: Path) -> tuple[bytes, bytes | None]:
    """The log's bytes and its head's, read together under the log's shared lock, so an
    append (which holds it exclusively) is never seen half done. ValueError when either is
    not a regular file; a missing log reads as empty."""
    try:
        fd = open_regular(log, os.O_RDONLY)
    except FileNotFoundError:
        return b"", read_head_bytes(log)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        return read_fd(fd, MAX_LOG_BYTES, log), read_head_bytes(log)
    finally:
        os.close(fd)


def _verify_snapshot(
    key: bytes, log: Path, content: bytes, head_bytes: bytes | None, checkpoint: Path | None
) -> tuple[Verdict, list[dict[str, Any]]]:
    lines = content.split(b"\n")
    partial = lines.pop()  # b"" when the log ends with a newline, as every append leaves it
    entries, problem = _walk(key, lines)
    if problem is None and partial:
        problem = f"line {len(lines) + 1}: no newline at its end (a partial or foreign write)"
    problem = problem or _check_head(key, log, head_bytes, entries)
    if problem is None and checkpoint is not None:
        try:
            problem = _check_checkpoint(read_checkpoint(key, checkpoint), entries)
        except ValueError as e:
            problem = str(e)
    return Verdict(len(lines) + bool(partial), problem), entries


def verify(log: Path, key: bytes, checkpoint: Path | None = None) -> Verdict:
    """Check every line's bytes, MAC, number and link, then the head, then (given) the
    checkpoint. ValueError when the log or head is not a regular file."""
    content, head_bytes = _snapshot(log)
    return _verify_snapshot(key, log, content, head_bytes, checkpoint)[0]


def record_checkpoint(log: Path, key: bytes, checkpoint: Path) -> Verdict:
    """Verify the log (against ``checkpoint`` when it exists) and, if intact, record in the
    checkpoint the end of the chain just verified, from the same read: nothing read after the
    check is signed. Never records fewer lines than the checkpoint it replaces. ValueError
    when ``checkpoint`` is in the log's directory."""
    check_outside(checkpoint, log, "the checkpoint")
    with locked(checkpoint):  # two recorders must not move it back
        previous = checkpoint if checkpoint.exists() or checkpoint.is_symlink() else None
        content, head_bytes = _snapshot(log)
        verdict, entries = _verify_snapshot(key, log, content, head_bytes, previous)
        if not verdict.ok:
            return verdict
        if not entries:
            return Verdict(verdict.num_lines, "no line to record in a checkpoint")
        if previous is not None:
            before = read_checkpoint(key, previous)
            if before.get("log") == entries[0]["log"] and before["num_lines"] > len(entries):
                return Verdict(verdict.num_lines, "the checkpoint would move back: not recorded")
        last = entries[-1]
        record: dict[str, Any] = {"log": last["log"], "num_lines": last["seq"]}
        record["last_mac"] = last["mac"]
        record["time"] = datetime.now(UTC).isoformat(timespec="seconds")
        record["mac"] = mac(key, CHECKPOINT, record)
        replace_text(checkpoint, canonical(record) + "\n", new_mode=0o600)
    return verdict
