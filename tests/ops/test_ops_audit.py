"""The MCP audit log: appends chain each line to the one before, concurrent appends keep one
chain, secrets are redacted, and `claimbench audit --verify` names the first line an edit,
a deletion or an insertion breaks."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from cli_helpers import invoke

from claimbench.ops.audit import (
    GENESIS,
    REDACTED,
    AuditLog,
    entry_sha,
    head_path,
    redact,
    verify,
)


def write_log(path: Path, num: int) -> list[dict]:
    log = AuditLog(path)
    return [log.append({"tool": "list_claims", "n": i, "arguments": {}}) for i in range(num)]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_each_line_carries_its_hash_and_the_previous_one(tmp_path: Path) -> None:
    path = tmp_path / "a" / "mcp.jsonl"
    entries = write_log(path, 3)
    assert entries[0]["prev"] == GENESIS
    assert [e["prev"] for e in entries[1:]] == [e["sha"] for e in entries[:-1]]
    assert [json.loads(line) for line in lines(path)] == entries
    assert all(entry_sha(e) == e["sha"] for e in entries)
    assert verify(path).ok and verify(path).num_lines == 3


def test_concurrent_appends_keep_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "mcp.jsonl"
    log = AuditLog(path)

    def append_many(worker: int) -> None:
        for i in range(25):
            log.append({"worker": worker, "i": i})

    threads = [threading.Thread(target=append_many, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    verdict = verify(path)
    assert verdict.ok and verdict.num_lines == 100, verdict


def test_an_edited_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "mcp.jsonl"
    write_log(path, 4)
    text = lines(path)
    edited = json.loads(text[1])
    edited["outcome"] = "ok"  # rewriting what a refused call's line said
    text[1] = json.dumps(edited, separators=(",", ":"))
    path.write_text("\n".join(text) + "\n")
    verdict = verify(path)
    assert (verdict.broken_line, verdict.reason.split(":")[0]) == (2, "edited")


def test_an_edit_that_recomputes_its_own_hash_breaks_the_next_line(tmp_path: Path) -> None:
    path = tmp_path / "mcp.jsonl"
    write_log(path, 4)
    text = lines(path)
    forged = json.loads(text[1]) | {"agent": "someone-else"}
    forged["sha"] = entry_sha(forged)
    text[1] = json.dumps(forged, separators=(",", ":"))
    path.write_text("\n".join(text) + "\n")
    verdict = verify(path)
    assert verdict.broken_line == 3 and "does not follow line 2" in verdict.reason


def test_a_deleted_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "mcp.jsonl"
    write_log(path, 4)
    text = lines(path)
    del text[1]
    path.write_text("\n".join(text) + "\n")
    verdict = verify(path)
    assert verdict.broken_line == 2 and "deleted" in verdict.reason


def test_deleting_the_last_lines_is_named_from_the_head(tmp_path: Path) -> None:
    path = tmp_path / "mcp.jsonl"
    write_log(path, 4)
    text = lines(path)
    path.write_text("\n".join(text[:2]) + "\n")  # the chain that is left is intact
    verdict = verify(path)
    assert verdict.broken_line == 3 and "its head records 4" in verdict.reason
    head_path(path).unlink()
    assert "is missing" in verify(path).reason


def test_a_head_behind_the_log_is_a_crash_window_not_tampering(tmp_path: Path) -> None:
    path = tmp_path / "mcp.jsonl"
    write_log(path, 2)
    head = head_path(path).read_text()
    AuditLog(path).append({"tool": "score"})
    head_path(path).write_text(head)  # the append landed, its head update did not
    assert verify(path).ok
    AuditLog(path).append({"tool": "build_site"})  # the next append counts again
    assert verify(path).ok and json.loads(head_path(path).read_text())["num_lines"] == 4


def test_secret_named_arguments_are_redacted_at_any_depth() -> None:
    given = {"claims": ["kv-int8"], "api_key": "sk-1", "nested": [{"Token": "t", "n": 1}]}
    assert redact(given) == {
        "claims": ["kv-int8"],
        "api_key": REDACTED,
        "nested": [{"Token": REDACTED, "n": 1}],
    }


def test_cli_audit_shows_the_tail_and_verifies(tmp_path: Path) -> None:
    path = tmp_path / "mcp.jsonl"
    write_log(path, 5)
    shown = invoke("audit", "--log", str(path), "--tail", "2", "--verify")
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.count("list_claims") == 2
    assert "chain intact over 5 line(s)" in shown.stdout
    text = lines(path)
    path.write_text("\n".join(text[:2] + text[3:]) + "\n")
    broken = invoke("audit", "--log", str(path), "--tail", "0", "--verify")
    assert broken.exit_code == 1
    (message,) = broken.stderr.strip().splitlines()
    assert f"{path} line 3: does not follow line 2" in message
    missing = invoke("audit", "--log", str(tmp_path / "none.jsonl"))
    assert missing.exit_code == 2 and "cannot read audit log" in missing.stderr
