"""The MCP audit log: keyed, chained lines; concurrent appends keep one chain; secrets are
redacted; and verification with the key names what each kind of tampering did, with the
tamperer able to write the log, its head and its directory but not to read the key."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import stat
import threading
from pathlib import Path

import pytest

from claimbench.ops.audit import GENESIS, REDACTED, AuditLog, head_path, redact
from claimbench.ops.audit_key import HEAD, LINE, load_or_create_key, mac
from claimbench.ops.audit_verify import record_checkpoint, verify

NUM_LINES = 8


@pytest.fixture
def key(tmp_path: Path) -> bytes:
    return load_or_create_key(tmp_path / "keys" / "audit.key")


@pytest.fixture
def path(tmp_path: Path, key: bytes) -> Path:
    log = tmp_path / "audit" / "mcp.jsonl"
    write_log(log, key, NUM_LINES)
    return log


def write_log(path: Path, key: bytes, num: int) -> list[dict]:
    log = AuditLog(path, key)
    return [log.append({"tool": "list_claims", "n": i, "arguments": {}}) for i in range(num)]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def write_lines(path: Path, text: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in text))


def rehash(entries: list[dict], key: bytes) -> list[str]:
    """What a tamperer would do: re-chain and re-MAC every line with a key of its own."""
    prev, out = GENESIS, []
    for number, entry in enumerate(entries, start=1):
        entry = {k: v for k, v in entry.items() if k != "mac"} | {"prev": prev, "seq": number}
        entry["mac"] = mac(key, LINE, entry)
        prev = entry["mac"]
        out.append(json.dumps(entry, separators=(",", ":")))
    return out


def forge_head(path: Path, key: bytes, **fields) -> None:
    head = json.loads(head_path(path).read_text()) | fields
    head["mac"] = mac(key, HEAD, head)
    head_path(path).write_text(json.dumps(head))


def problem(path: Path, key: bytes, checkpoint: Path | None = None) -> str:
    verdict = verify(path, key, checkpoint)
    assert not verdict.ok, "tampering was not detected"
    return verdict.problem


def test_each_line_carries_its_number_its_mac_and_the_previous_one(path: Path, key: bytes):
    entries = [json.loads(line) for line in lines(path)]
    assert entries[0]["prev"] == GENESIS and [e["seq"] for e in entries] == list(range(1, 9))
    assert [e["prev"] for e in entries[1:]] == [e["mac"] for e in entries[:-1]]
    assert len({e["log"] for e in entries}) == 1
    assert verify(path, key).ok and verify(path, key).num_lines == NUM_LINES


def test_concurrent_appends_keep_one_chain(tmp_path: Path, key: bytes) -> None:
    path = tmp_path / "mcp.jsonl"
    log = AuditLog(path, key)

    def append_many(worker: int) -> None:
        for i in range(25):
            log.append({"worker": worker, "i": i})

    threads = [threading.Thread(target=append_many, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    verdict = verify(path, key)
    assert verdict.ok and verdict.num_lines == 100, verdict


def _append_from_process(path: Path, key: bytes, worker: int) -> None:
    log = AuditLog(path, key)
    for i in range(25):
        log.append({"worker": worker, "i": i})


def test_appends_from_several_processes_keep_one_chain(tmp_path: Path, key: bytes) -> None:
    path = tmp_path / "mcp.jsonl"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_from_process, args=(path, key, w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    verdict = verify(path, key)
    assert verdict.ok and verdict.num_lines == 100, verdict


def test_the_key_file_is_private_and_made_once(tmp_path: Path, key: bytes) -> None:
    key_file = tmp_path / "keys" / "audit.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    assert load_or_create_key(key_file) == key and len(key) == 32


def test_a_missing_key_is_not_replaced_while_the_log_has_lines(path: Path, tmp_path) -> None:
    with pytest.raises(ValueError, match="is missing but .* already holds lines"):
        load_or_create_key(tmp_path / "elsewhere" / "audit.key", path)
    assert not (tmp_path / "elsewhere").exists()


def test_an_appended_line_with_its_hash_recomputed(path: Path, key: bytes) -> None:
    last = json.loads(lines(path)[-1])
    forged = {"tool": "run_claims", "log": last["log"], "seq": NUM_LINES + 1, "prev": last["mac"]}
    forged["mac"] = mac(b"\0" * 32, LINE, forged)  # any key but the server's
    write_lines(path, [*lines(path), json.dumps(forged)])
    forge_head(path, b"\0" * 32, num_lines=NUM_LINES + 1, last_mac=forged["mac"])
    assert problem(path, key).startswith(f"line {NUM_LINES + 1}: its MAC does not match")


def test_an_edited_line_with_the_chain_rehashed_and_the_head_rewritten(path, key) -> None:
    entries = [json.loads(line) for line in lines(path)]
    entries[2]["outcome"] = "ok"  # rewriting what a refused call's line said
    other = b"\1" * 32
    text = rehash(entries, other)
    write_lines(path, text)
    forge_head(path, other, last_mac=json.loads(text[-1])["mac"])
    assert problem(path, key).startswith("line 1: its MAC does not match")


def test_an_edited_line_keeping_its_old_mac(path: Path, key: bytes) -> None:
    text = lines(path)
    text[3] = text[3].replace('"n":3', '"n":30')
    write_lines(path, text)
    assert problem(path, key).startswith("line 4: its MAC does not match")


def test_the_last_lines_deleted_with_the_head_rewritten(path: Path, key: bytes) -> None:
    write_lines(path, lines(path)[:-3])
    ends = f"the log ends at line 5, its head records {NUM_LINES}: lines deleted"
    assert problem(path, key) == ends
    forge_head(path, b"\2" * 32, num_lines=5)
    assert problem(path, key).startswith("mcp.jsonl.head: its MAC does not match")


def test_the_head_set_to_zero_lines_and_lines_deleted(path: Path, key: bytes) -> None:
    write_lines(path, lines(path)[:3])
    head = json.loads(head_path(path).read_text()) | {"num_lines": 0}
    head_path(path).write_text(json.dumps(head))
    assert problem(path, key).startswith("mcp.jsonl.head: its MAC does not match")


def test_a_log_emptied_and_its_head_deleted(path: Path, key: bytes) -> None:
    path.write_text("")
    head_path(path).unlink()
    assert problem(path, key).startswith("no audit line and no head")
    path.unlink()
    assert problem(path, key).startswith("no audit line and no head")


def test_a_log_emptied_with_its_head_kept(path: Path, key: bytes) -> None:
    path.write_text("")
    ends = f"the log ends at line 0, its head records {NUM_LINES}: lines deleted"
    assert problem(path, key) == ends


def test_the_head_deleted_alone(path: Path, key: bytes) -> None:
    head_path(path).unlink()
    assert problem(path, key) == "mcp.jsonl.head is missing: lines at the end may have been deleted"


def test_a_head_that_lags_behind_the_log(path: Path, key: bytes) -> None:
    old_head = head_path(path).read_text()
    AuditLog(path, key).append({"tool": "score"})
    head_path(path).write_text(old_head)  # a head restored from before (or a crash)
    assert problem(path, key).startswith(f"the head lags: it records {NUM_LINES} line(s)")


def test_a_line_deleted_in_the_middle(path: Path, key: bytes) -> None:
    text = lines(path)
    del text[2]
    write_lines(path, text)
    assert problem(path, key).startswith("line 3: carries number 4: 1 line(s) before it deleted")


def test_the_first_line_deleted(path: Path, key: bytes) -> None:
    write_lines(path, lines(path)[1:])
    assert problem(path, key).startswith("line 1: carries number 2")


def test_two_lines_swapped(path: Path, key: bytes) -> None:
    text = lines(path)
    text[2], text[3] = text[3], text[2]
    write_lines(path, text)
    assert problem(path, key).startswith("line 3: carries number 4")


def test_a_line_duplicated(path: Path, key: bytes) -> None:
    text = lines(path)
    write_lines(path, [*text[:4], text[3], *text[4:]])
    assert problem(path, key).startswith("line 5: carries number 4: a line repeated")


def test_the_last_line_replayed_at_the_end(path: Path, key: bytes) -> None:
    text = lines(path)
    write_lines(path, [*text, text[-1]])
    assert problem(path, key).startswith(f"line {NUM_LINES + 1}: carries number {NUM_LINES}")


def test_a_line_from_another_log_under_the_same_key(path: Path, key: bytes, tmp_path) -> None:
    other = tmp_path / "other" / "mcp.jsonl"
    write_log(other, key, NUM_LINES)
    text = lines(path)
    text[4] = lines(other)[4]  # same number, valid MAC, but another log's
    write_lines(path, text)
    assert problem(path, key).startswith("line 5: from another log")


def test_a_line_that_is_not_json(path: Path, key: bytes) -> None:
    write_lines(path, [*lines(path)[:2], "garbage", *lines(path)[2:]])
    assert problem(path, key).startswith("line 3: not a JSON line")


def test_verifying_under_another_key(path: Path) -> None:
    assert problem(path, b"\3" * 32).startswith("line 1: its MAC does not match")


def test_an_append_after_tampering_keeps_the_evidence(path: Path, key: bytes) -> None:
    write_lines(path, lines(path)[:-3])
    head_path(path).unlink()
    AuditLog(path, key).append({"tool": "score"})  # the server goes on logging
    assert problem(path, key) == "line 6: appended after tampering: the head was missing"
    emptied = path.with_name("b.jsonl")
    write_log(emptied, key, 3)
    emptied.write_text("")
    AuditLog(emptied, key).append({"tool": "score"})
    assert problem(emptied, key).startswith("line 1: carries number 4: 3 line(s) before it")
    assert "the log was empty, its head recorded 3 line(s)" in lines(emptied)[0]


def test_a_checkpoint_catches_a_rollback_of_log_and_head(path, key, tmp_path) -> None:
    checkpoint = tmp_path / "keep" / "audit.checkpoint"
    checkpoint.parent.mkdir()
    saved = tmp_path / "saved"
    saved.mkdir()
    shutil.copy(path, saved / "log")
    shutil.copy(head_path(path), saved / "head")  # an older, internally consistent copy
    write_log(path, key, 3)
    assert record_checkpoint(path, key, checkpoint).ok
    write_log(path, key, 2)
    assert verify(path, key, checkpoint).ok  # the log extends its checkpoint
    shutil.copy(saved / "log", path)
    shutil.copy(saved / "head", head_path(path))
    assert verify(path, key).ok  # the head alone cannot tell
    assert problem(path, key, checkpoint).startswith("rolled back: the checkpoint of")
    assert not record_checkpoint(path, key, checkpoint).ok  # nor is it moved back


def test_a_checkpoint_catches_a_substituted_or_rewritten_log(path, key, tmp_path) -> None:
    checkpoint = tmp_path / "audit.checkpoint"
    assert record_checkpoint(path, key, checkpoint).ok
    other = tmp_path / "other" / "mcp.jsonl"
    write_log(other, key, NUM_LINES + 2)  # a whole other log and head under the same key
    shutil.copy(other, path)
    shutil.copy(head_path(other), head_path(path))
    assert verify(path, key).ok
    assert problem(path, key, checkpoint).startswith("not the log the checkpoint")
    edited = json.loads(checkpoint.read_text()) | {"num_lines": 1}
    checkpoint.write_text(json.dumps(edited))
    assert "its MAC does not match" in problem(path, key, checkpoint)


def test_a_checkpoint_in_the_logs_directory_is_refused(path: Path, key: bytes) -> None:
    with pytest.raises(ValueError, match="inside the audit log's directory"):
        record_checkpoint(path, key, path.with_name("audit.checkpoint"))


def test_secret_named_arguments_are_redacted_at_any_depth() -> None:
    given = {"claims": ["kv-int8"], "api_key": "sk-1", "nested": [{"Token": "t", "n": 1}]}
    assert redact(given) == {
        "claims": ["kv-int8"],
        "api_key": REDACTED,
        "nested": [{"Token": REDACTED, "n": 1}],
    }


@pytest.mark.parametrize(
    "name", ["max_num_batched_tokens", "max_tokens", "num_tokens", "tokenizer", "Tokens"]
)
def test_token_counts_and_tokenizers_are_logged_not_redacted(name: str) -> None:
    # warm_cache's max_num_batched_tokens once read "[redacted]": the log lost what was asked.
    assert redact({name: 512}) == {name: 512}


@pytest.mark.parametrize(
    "name", ["token", "access_token", "tokenHash", "private_key", "metrics-key", "credentials"]
)
def test_secret_names_stay_redacted(name: str) -> None:
    assert redact({name: "s3cret"}) == {name: REDACTED}
