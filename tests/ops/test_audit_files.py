"""The audit log's files as an intruder who can write the log's directory leaves them: only
the canonical bytes of each line verify, the key must be the user's own 0600 regular file,
verification reads the log and its head together under the log's lock, a checkpoint signs
only what was verified and never moves back, and `audit` prints no terminal control
character and never hangs or shows a traceback."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest
from cli_helpers import invoke

import claimbench.ops.audit_verify as audit_verify
from claimbench.ops.audit import AuditLog, head_path
from claimbench.ops.audit_key import load_key, load_or_create_key
from claimbench.ops.audit_verify import read_checkpoint, record_checkpoint, verify


@pytest.fixture
def key(tmp_path: Path) -> bytes:
    return load_or_create_key(tmp_path / "keys" / "audit.key")


@pytest.fixture
def path(tmp_path: Path, key: bytes) -> Path:
    log = tmp_path / "audit" / "mcp.jsonl"
    audit = AuditLog(log, key)
    for i in range(4):
        audit.append({"tool": "list_claims", "n": i, "arguments": {"q": "é"}})
    return log


def rewrite(path: Path, change) -> None:
    lines = path.read_bytes().split(b"\n")[:-1]
    path.write_bytes(change(lines))


def _dup_key(line: bytes) -> bytes:
    return line[:-1] + b',"tool":"list_claims"}'


def _escaped(line: bytes) -> bytes:
    return line.replace(b'"list_claims"', b'"list\\u005fclaims"')


# Each changes line 2's bytes but not the record json.loads reads from it.
VARIANTS = {
    "crlf": lambda ls: b"".join(line + (b"\r\n" if i == 1 else b"\n") for i, line in enumerate(ls)),
    "blank line": lambda ls: b"\n".join([*ls[:2], b"", *ls[2:]]) + b"\n",
    "duplicate key": lambda ls: b"".join(
        (_dup_key(line) if i == 1 else line) + b"\n" for i, line in enumerate(ls)
    ),
    "unicode escape": lambda ls: b"".join(
        (_escaped(line) if i == 1 else line) + b"\n" for i, line in enumerate(ls)
    ),
    "spaces": lambda ls: b"".join(
        (line.replace(b":", b": ", 1) if i == 1 else line) + b"\n" for i, line in enumerate(ls)
    ),
    "bom": lambda ls: b"\xef\xbb\xbf" + b"".join(line + b"\n" for line in ls),
    "utf-16": lambda ls: b"".join(line + b"\n" for line in ls).decode().encode("utf-16"),
    "trailing bytes": lambda ls: b"".join(line + b"\n" for line in ls) + b"\0\0",
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_only_the_canonical_bytes_verify(path: Path, key: bytes, variant: str) -> None:
    assert verify(path, key).ok
    rewrite(path, VARIANTS[variant])
    assert not verify(path, key).ok, f"{variant}: re-encoded lines passed"


def test_a_group_readable_or_linked_key_is_refused(tmp_path: Path, key: bytes) -> None:
    key_file = tmp_path / "keys" / "audit.key"
    os.chmod(key_file, 0o644)
    with pytest.raises(ValueError, match="has mode 0644"):
        load_key(key_file)
    os.chmod(key_file, 0o600)
    link = tmp_path / "keys" / "link.key"
    link.symlink_to(key_file)
    with pytest.raises(ValueError, match="symbolic link"):
        load_key(link)
    assert load_key(key_file) == key


def test_verify_reads_log_and_head_under_the_logs_lock(path: Path, key: bytes, monkeypatch):
    """While verify reads the head, no append (which locks the log exclusively) can run."""
    read_head = audit_verify.read_head_bytes
    appender_blocked: list[bool] = []

    def probing_read(log: Path):
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            appender_blocked.append(False)
        except BlockingIOError:
            appender_blocked.append(True)
        finally:
            os.close(fd)
        return read_head(log)

    monkeypatch.setattr(audit_verify, "read_head_bytes", probing_read)
    assert verify(path, key).ok
    assert appender_blocked == [True]


def test_a_checkpoint_signs_only_what_was_verified(
    tmp_path: Path, path: Path, key: bytes, monkeypatch
) -> None:
    """A valid older head swapped in right after the check must not reach the checkpoint."""
    old_head = head_path(path).read_bytes()  # the server's own head at line 4
    AuditLog(path, key).append({"tool": "t"})
    AuditLog(path, key).append({"tool": "t"})
    read_head = audit_verify.read_head_bytes

    def read_then_swap(log: Path):
        data = read_head(log)
        head_path(path).write_bytes(old_head)  # the intruder's swap, after the read
        return data

    monkeypatch.setattr(audit_verify, "read_head_bytes", read_then_swap)
    checkpoint = tmp_path / "cp" / "audit.checkpoint"
    checkpoint.parent.mkdir()
    assert record_checkpoint(path, key, checkpoint).ok
    assert read_checkpoint(key, checkpoint)["num_lines"] == 6


def test_a_checkpoint_never_moves_back(tmp_path: Path, path: Path, key: bytes) -> None:
    checkpoint = tmp_path / "cp" / "audit.checkpoint"
    checkpoint.parent.mkdir()
    old_log, old_head = path.read_bytes(), head_path(path).read_bytes()
    AuditLog(path, key).append({"tool": "t"})
    assert record_checkpoint(path, key, checkpoint).ok
    recorded = checkpoint.read_bytes()
    path.write_bytes(old_log)
    head_path(path).write_bytes(old_head)
    assert not record_checkpoint(path, key, checkpoint).ok
    assert checkpoint.read_bytes() == recorded


def test_tail_prints_no_control_characters(tmp_path: Path, _audit_key_file: Path) -> None:
    log = tmp_path / "mcp.jsonl"
    audit = AuditLog(log, load_or_create_key(_audit_key_file))
    forged = "\x1b[1A\x1b[2K\r2026-12-06T06:00:00  bot  list_claims{}  ok\x1b[8m"
    audit.append({"tool": forged, "agent": "a\u200bb", "arguments": {"x": "\x07"}, "outcome": "ok"})
    shown = invoke("audit", "--log", str(log), "--tail", "5")
    assert shown.exit_code == 0, shown.output
    assert not any(c in shown.stdout for c in "\x1b\r\x07\u200b")
    assert "\\x1b[1A" in shown.stdout


def test_a_deeply_nested_line_is_one_error_line(tmp_path: Path, _audit_key_file: Path) -> None:
    log = tmp_path / "mcp.jsonl"
    AuditLog(log, load_or_create_key(_audit_key_file)).append({"tool": "t"})
    with log.open("ab") as f:
        f.write(b"[" * 100_000 + b"\n")
    result = invoke("audit", "--log", str(log), "--tail", "5", "--verify")
    assert result.exit_code == 1, result.output
    assert "unreadable line" in result.stdout
    (message,) = result.stderr.strip().splitlines()
    assert "line 2: not a JSON line" in message


@pytest.mark.parametrize("which", ["log", "head"])
def test_a_fifo_in_place_of_the_log_or_head_is_refused(
    tmp_path: Path, _audit_key_file: Path, which: str
) -> None:
    log = tmp_path / "mcp.jsonl"
    AuditLog(log, load_or_create_key(_audit_key_file)).append({"tool": "t"})
    target = log if which == "log" else head_path(log)
    target.unlink()
    os.mkfifo(target)
    out: list = []
    worker = threading.Thread(
        target=lambda: out.append(invoke("audit", "--log", str(log), "--verify")), daemon=True
    )
    worker.start()
    worker.join(60)  # a hang, not a slowness: verify takes milliseconds
    assert out, f"verify blocked on a FIFO at the {which}'s path"
    assert out[0].exit_code == 1, out[0].output
    (message,) = out[0].stderr.strip().splitlines()
    assert "is not a regular file" in message


def test_a_refused_stdio_start_with_an_unwritable_log_is_one_line(
    tmp_path: Path, _audit_key_file: Path, monkeypatch
) -> None:
    agents = tmp_path / "agents.yaml"
    invoke("agents", "add", "ops", "--file", str(agents))
    log = tmp_path / "audit" / "mcp.jsonl"
    log.parent.mkdir()
    log.symlink_to(tmp_path / "victim.txt")
    monkeypatch.setenv("CLAIMBENCH_AGENT_TOKEN", "cba-not-a-token")
    result = invoke("mcp", "--agents", str(agents), "--audit-log", str(log))
    assert result.exit_code == 2, result.output
    (message,) = result.stderr.strip().splitlines()
    assert "is not the token of any agent" in message and "symbolic link" in message
    assert not (tmp_path / "victim.txt").exists()
