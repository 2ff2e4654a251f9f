"""Verifying the audit log (ops/audit.py) with its key, against its head and a checkpoint.

A checkpoint is the head as it was when the operator (or the nightly) last verified the log,
MACed under the audit key and kept outside the log's directory. The log must extend it: same
log id, at least as many lines, and the line the checkpoint names still there unchanged. That
catches what the head alone cannot: a log cut back together with its head to an older copy,
or replaced by another log's lines and head.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from claimbench.ops.audit import GENESIS, head_path, read_head, read_lines
from claimbench.ops.audit_key import CHECKPOINT, HEAD, LINE, check_outside, mac, mac_ok
from claimbench.platform.file_lock import locked
from claimbench.platform.files import replace_text


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
            entry = json.loads(line)
        except ValueError:
            return entries, f"line {number}: not a JSON line"
        if not isinstance(entry, dict) or not isinstance(entry.get("seq"), int):
            return entries, f"line {number}: not an audit entry (no log, seq, prev, mac)"
        if not mac_ok(key, LINE, entry):
            return entries, (
                f"line {number}: its MAC does not match (edited, written without the key, "
                "or under another key)"
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


def _check_head(key: bytes, log: Path, entries: list[dict[str, Any]]) -> str | None:
    """The intact chain against its head: the same log, as many lines, ending at its MAC."""
    name = head_path(log).name
    head = read_head(log)
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
        record = json.loads(checkpoint.read_text())
    except FileNotFoundError:
        raise ValueError(f"checkpoint {checkpoint} is missing") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read checkpoint {checkpoint}: {e}") from None
    if not isinstance(record, dict) or not mac_ok(key, CHECKPOINT, record):
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


def verify(log: Path, key: bytes, checkpoint: Path | None = None) -> Verdict:
    """Check every line's MAC, number and link, then the head, then (given) the checkpoint."""
    lines = read_lines(log) if log.exists() else []
    entries, problem = _walk(key, lines)
    problem = problem or _check_head(key, log, entries)
    if problem is None and checkpoint is not None:
        try:
            problem = _check_checkpoint(read_checkpoint(key, checkpoint), entries)
        except ValueError as e:
            problem = str(e)
    return Verdict(len(lines), problem)


def record_checkpoint(log: Path, key: bytes, checkpoint: Path) -> Verdict:
    """Verify the log (against ``checkpoint`` when it exists) and, if intact, record its head
    there. ValueError when ``checkpoint`` is in the log's directory."""
    check_outside(checkpoint, log, "the checkpoint")
    with locked(checkpoint):  # two recorders must not move it back
        verdict = verify(log, key, checkpoint if checkpoint.exists() else None)
        if verdict.ok:
            head = read_head(log)
            assert head is not None  # verify passed
            record = {k: head[k] for k in ("log", "num_lines", "last_mac")}
            record["time"] = datetime.now(UTC).isoformat(timespec="seconds")
            record["mac"] = mac(key, CHECKPOINT, record)
            replace_text(checkpoint, json.dumps(record), new_mode=0o600)
    return verdict
