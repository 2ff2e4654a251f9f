"""`claimbench audit`: the tail, --verify with the key (one line, exit 1 on any problem),
--checkpoint recording the head outside the log's directory."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import invoke

from claimbench.ops.audit import AuditLog
from claimbench.ops.audit_key import load_or_create_key


def write_log(path: Path, key_file: Path, num: int) -> None:
    log = AuditLog(path, load_or_create_key(key_file))
    for i in range(num):
        log.append({"tool": "list_claims", "n": i, "arguments": {}})


def one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    (message,) = result.stderr.strip().splitlines()
    return message


def test_cli_audit_shows_the_tail_and_verifies(tmp_path: Path, _audit_key_file: Path) -> None:
    path = tmp_path / "mcp.jsonl"
    write_log(path, _audit_key_file, 5)
    shown = invoke("audit", "--log", str(path), "--tail", "2", "--verify")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.count("list_claims") == 2
    assert "intact over 5 line(s)" in shown.stdout
    text = path.read_text().splitlines()
    path.write_text("".join(line + "\n" for line in text[:2] + text[3:]))
    broken = invoke("audit", "--log", str(path), "--tail", "0", "--verify")
    assert one_line_error(broken).endswith(
        f"{path}: line 3: carries number 4: 1 line(s) before it deleted, or lines reordered"
    )
    missing = invoke("audit", "--log", str(tmp_path / "none.jsonl"))
    assert missing.exit_code == 2 and "no audit log at" in missing.stderr


def test_cli_verify_without_the_key_fails(tmp_path: Path, _audit_key_file: Path) -> None:
    path = tmp_path / "mcp.jsonl"
    write_log(path, _audit_key_file, 2)
    gone = tmp_path.parent / "no-such-dir" / "audit.key"
    result = invoke("audit", "--log", str(path), "--verify", "--audit-key-file", str(gone))
    assert "is missing: cannot check the log" in one_line_error(result)
    inside = invoke(
        "audit", "--log", str(path), "--verify", "--audit-key-file", str(tmp_path / "k")
    )
    assert "inside the audit log's directory" in one_line_error(inside)


def test_cli_checkpoint_then_rollback(tmp_path: Path, _audit_key_file: Path) -> None:
    path = tmp_path / "log" / "mcp.jsonl"
    checkpoint = tmp_path / "keep" / "audit.checkpoint"
    checkpoint.parent.mkdir()
    write_log(path, _audit_key_file, 3)
    old_log, old_head = path.read_bytes(), path.with_name("mcp.jsonl.head").read_bytes()
    write_log(path, _audit_key_file, 2)
    args = ["audit", "--log", str(path), "--tail", "0", "--checkpoint-file", str(checkpoint)]
    assert invoke(*args, "--checkpoint").exit_code == 0
    assert invoke(*args, "--verify").exit_code == 0
    path.write_bytes(old_log)
    path.with_name("mcp.jsonl.head").write_bytes(old_head)
    assert invoke("audit", "--log", str(path), "--verify").exit_code == 0  # the head can't tell
    message = one_line_error(invoke(*args, "--verify"))
    assert (
        "rolled back: the checkpoint of" in message
        and "records 5 line(s), the log has 3" in message
    )
    needs = invoke("audit", "--log", str(path), "--checkpoint")
    assert needs.exit_code == 2 and "--checkpoint needs --checkpoint-file" in needs.stderr
