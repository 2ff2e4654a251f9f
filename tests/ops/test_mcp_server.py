"""`claimbench mcp` in memory, through the SDK's own client: the tools and their schemas, the
guard (tokens, scopes, bad calls, each logged), the budget gate and cancelling a job."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from ledger_helpers import V6E, row, with_settings
from mcp_helpers import Ops, add_slow_claim, make_agents

from claimbench.hardware import detection
from claimbench.hardware.chips import PRICE_ENV_VAR
from claimbench.ledger import ledger
from claimbench.ops.guard import FORBIDDEN, UNAUTHENTICATED
from claimbench.ops.scopes import TOOL_SCOPES


@pytest.fixture
def ops(project: Path, tmp_path: Path):
    tokens = make_agents(
        tmp_path / "agents.yaml",
        reader=["read"],
        runner=["read", "run"],
        payer=["read", "run", "spend"],
    )
    ops = Ops(project, tmp_path, tokens)
    yield ops
    ops.close()


def log_entries(ops: Ops) -> list[dict]:
    """The outcome lines (each call allowed through also has a ``started`` line before it)."""
    entries = [json.loads(line) for line in ops.log.read_text().splitlines()]
    return [e for e in entries if e.get("outcome") != "started"]


def runs(project: Path) -> list[str]:
    path = project / "results" / "runs"
    return sorted(p.name for p in path.iterdir()) if path.is_dir() else []


def string_schemas(schema: dict) -> list[dict]:
    """The string-typed schemas inside ``schema`` (through anyOf and array items)."""
    found = [schema] if schema.get("type") == "string" else []
    for option in schema.get("anyOf", []):
        found += string_schemas(option)
    if isinstance(schema.get("items"), dict):
        found += string_schemas(schema["items"])
    return found


def free_string(schema: dict) -> bool:
    return "enum" not in schema and "pattern" not in schema and "const" not in schema


def test_every_tool_is_listed_with_typed_inputs_and_a_structured_output(ops: Ops) -> None:
    async def listing(c):
        return (await c.list_tools()).tools

    # The handshake-era transport (JSON-RPC over in-memory streams) lists the same tools.
    tools = {t.name: t for t in ops.session("reader", listing, mode="legacy")}
    assert set(tools) == set(TOOL_SCOPES)
    for tool in tools.values():
        assert tool.description and tool.output_schema is not None, tool.name
        # No tool takes free text (a path, a URL, a command): every string is a choice or
        # matches a pattern.
        for name, prop in tool.input_schema.get("properties", {}).items():
            assert all(free_string(s) is False for s in string_schemas(prop)), (tool.name, name)
    run = tools["run_claims"].input_schema
    assert run["required"] == ["claims"]
    assert run["properties"]["profile"]["enum"] == ["quick", "full"]
    assert "over_budget" not in run["properties"]
    assert tools["tpu_check"].input_schema["properties"]["chip"]["enum"] == ["v5e", "v6e"]
    assert "job_id" in tools["job_status"].output_schema["properties"]


def test_read_tools_answer_from_the_stored_runs(ops: Ops) -> None:
    claims = ops.call("reader", "list_claims")["claims"]
    assert {c["id"]: c["status"] for c in claims}["fake-unwritten"] == "no experiment yet"
    shown = ops.call("reader", "show_claim", {"claim_id": "fake-pass"})
    assert shown["prediction"] == ["score >= 1"] and shown["status"] == "not run"
    assert ops.call("reader", "get_budget")["remaining_usd"] == 100.0
    assert ops.call("reader", "get_env")["platform"] == "cpu"


def test_a_read_only_agent_is_refused_run_and_the_refusal_is_logged(ops: Ops) -> None:
    err = ops.refused("reader", "run_claims", {"claims": ["fake-pass"]})
    assert err.code == FORBIDDEN
    assert "lacks scope 'run'" in err.message and "run_claims" in err.message
    (entry,) = log_entries(ops)
    assert entry["agent"] == "reader" and entry["tool"] == "run_claims"
    assert entry["arguments"] == {"claims": ["fake-pass"]} and entry["scope"] == ["run"]
    assert entry["outcome"].startswith("refused: agent 'reader' lacks scope 'run'")
    assert runs(ops.project) == []
    assert ops.jobs.get("job-00000000") is None


def test_bad_calls_are_one_clear_error_each_and_logged(ops: Ops) -> None:
    wrong = ops.refused("cba-not-a-token", "list_claims")
    assert wrong.code == UNAUTHENTICATED and "agent token" in wrong.message
    assert "unknown tool 'rm_rf'" in ops.refused("runner", "rm_rf").message
    extra = ops.refused("runner", "score", {"results_dir": "/tmp"})
    assert extra.message.startswith("score: unknown argument 'results_dir'")
    typed = ops.refused("runner", "run_claims", {"claims": ["fake-pass"], "profile": "huge"})
    assert typed.message.startswith("run_claims: profile:") and "\n" not in typed.message
    unknown = ops.refused("runner", "run_claims", {"claims": ["no-such-claim"]})
    assert "no-such-claim" in unknown.message
    entries = log_entries(ops)
    assert [e["agent"] for e in entries] == [None, "runner", "runner", "runner", "runner"]
    assert all(e["outcome"].startswith(("refused: ", "error: ")) for e in entries)
    assert runs(ops.project) == [] and ops.verify().ok


@pytest.mark.slow
def test_a_run_job_reports_progress_and_stores_its_run(ops: Ops) -> None:
    job = ops.call("runner", "run_claims", {"claims": ["fake-pass"], "trials": 3})
    assert job["state"] == "running"
    done = ops.wait_job("runner", job["job_id"], lambda s: s["state"] != "running", 120)
    assert done["state"] == "done", done
    (stored,) = done["result"]["stored"]
    assert runs(ops.project) == [stored["run_id"]]
    assert done["progress"] | {} == {
        "claim": "fake-pass",
        "claim_index": 1,
        "num_claims": 1,
        "trial": 3,
        "num_trials": 3,
    }
    assert ledger.read_ledger(ops.project / "results")["run_id"].tolist() == [stored["run_id"]]
    # Another agent's job is not there for it.
    assert "no job" in ops.refused("reader", "job_status", {"job_id": job["job_id"]}).message
    logged = [e for e in log_entries(ops) if e["tool"] == "run_claims"]
    assert logged[0]["job_id"] == job["job_id"] and logged[0]["outcome"] == "ok"


@pytest.mark.slow
def test_a_cancelled_job_leaves_no_run_directory(ops: Ops) -> None:
    add_slow_claim(ops.project)
    job = ops.call("runner", "run_claims", {"claims": ["fake-slow"]})
    midway = ops.wait_job(
        "runner", job["job_id"], lambda s: s["progress"].get("trial", 0) >= 2, 300
    )
    assert midway["state"] == "running" and midway["progress"]["num_trials"] == 600
    cancelled = ops.call("runner", "job_cancel", {"job_id": job["job_id"]})
    assert cancelled["state"] == "cancelled" and cancelled["stored"] == []
    runs_dir = ops.project / "results" / "runs"
    assert not runs_dir.exists() or list(runs_dir.iterdir()) == []  # no run, no .tmp- either
    assert not ledger.ledger_path(ops.project / "results").exists()


def _ignore_sigint():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    return lambda: signal.signal(signal.SIGINT, previous)


def _block_sigint():
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    return lambda: signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@pytest.mark.slow
@pytest.mark.parametrize("mask", [_ignore_sigint, _block_sigint], ids=["ignored", "blocked"])
def test_a_job_started_with_ctrl_c_ignored_or_blocked_still_cancels(ops: Ops, mask) -> None:
    # A server started in the background by a shell without job control inherits SIGINT
    # ignored, and one started by a runner that blocks signals inherits SIGINT blocked; its
    # workers inherit either: cancelling must still stop the job, not let it run on.
    add_slow_claim(ops.project)
    restore = mask()
    try:
        job = ops.call("runner", "run_claims", {"claims": ["fake-slow"]})
    finally:
        restore()
    ops.wait_job("runner", job["job_id"], lambda s: s["progress"].get("trial", 0) >= 1, 300)
    cancelled = ops.call("runner", "job_cancel", {"job_id": job["job_id"]})
    assert cancelled["state"] == "cancelled" and cancelled["stored"] == []
    assert ops.jobs.get(job["job_id"]).process.returncode == 130  # its own Ctrl-C, not a kill


@pytest.fixture
def on_v6e(monkeypatch):
    monkeypatch.delenv(PRICE_ENV_VAR, raising=False)
    real = detection.detect_hardware
    monkeypatch.setattr(detection, "detect_hardware", lambda: {**real(), **V6E})


def test_a_metered_run_needs_spend_and_an_over_budget_one_is_refused(ops: Ops, on_v6e) -> None:
    with_settings(ops.project)
    results = ops.project / "results"
    args = {"claims": ["fake-pass"], "profile": "full"}
    # A run on a metered chip is spending: run alone is not enough.
    err = ops.refused("runner", "run_claims", args)
    assert err.code == FORBIDDEN and "lacks scope 'spend'" in err.message
    ledger.append_rows(results, [row("earlier", claim_id="other", usd=99.0)])
    over = ops.refused("payer", "run_claims", args)
    assert "estimated cost $5.40 exceeds the remaining budget $1.00" in over.message
    assert runs(ops.project) == []
    assert ledger.read_ledger(results)["run_id"].tolist() == ["earlier"]
    scopes = [e["scope"] for e in log_entries(ops)]
    assert scopes == [["run", "spend"], ["run", "spend"]]


@pytest.mark.slow
def test_warm_cache_compiles_every_bucket_into_the_persistent_cache(ops: Ops) -> None:
    sizes = {"max_num_seqs": 2, "max_num_batched_tokens": 16, "max_model_len": 64}
    job = ops.call("runner", "warm_cache", sizes)
    done = ops.wait_job("runner", job["job_id"], lambda s: s["state"] != "running", 600)
    assert done["state"] == "done", done
    result = done["result"]
    assert result["num_buckets"] >= 1 and result["compile_s"] > 0
    # The cache experiments read (the suite points it at its own directory: conftest).
    assert result["cache_dir"] == os.environ["CLAIMBENCH_COMPILE_CACHE"]
    assert result["cache_entries_after"] >= 1


@pytest.mark.slow
def test_a_second_metered_run_waits_for_the_first(ops: Ops, on_v6e) -> None:
    add_slow_claim(ops.project)
    claims = ops.project / "claims.yaml"
    settings = "budget:\n  usd: 100\n  estimate_device_s: {quick: {default: 60}}\nclaims:\n"
    claims.write_text(settings + claims.read_text())
    first = ops.call("payer", "run_claims", {"claims": ["fake-slow"]})
    second = ops.refused("payer", "run_claims", {"claims": ["fake-pass"]})
    assert f"run job {first['job_id']} is still spending" in second.message
    assert ops.call("payer", "job_cancel", {"job_id": first["job_id"]})["state"] == "cancelled"


@pytest.mark.parametrize(
    ("tool", "arguments", "fragment"),
    [
        ("show_claim", {"claim_id": "fake-pass\n"}, "does not match"),
        ("job_status", {"job_id": "job-0000000a\n"}, "does not match"),
        ("tpu_check", {"chip": "v5e", "buckets": "16x8\n"}, "does not match"),
        ("tpu_check", {"chip": "v5e", "buckets": "\u0661\u0666x8"}, "does not match"),  # ١٦
        ("tpu_check", {"chip": "v5e", "kv_dtype": "kv-int8\n"}, "is not one of"),
    ],
)
def test_a_value_a_pattern_or_choice_refuses_is_refused_by_the_guard_and_logged(
    ops: Ops, tool: str, arguments: dict, fragment: str
) -> None:
    err = ops.refused("payer", tool, arguments)
    assert fragment in err.message
    (entry,) = log_entries(ops)
    assert entry["outcome"] == f"refused: {err.message}"


def test_a_tool_that_fails_logs_the_error_text_it_returned(ops: Ops, monkeypatch) -> None:
    def broken(root: Path) -> None:
        raise RuntimeError("the claims file vanished")

    monkeypatch.setattr("claimbench.ops.runbook.load_claims", broken)
    result = ops.session("reader", lambda c: c.call_tool("list_claims", {}))
    assert result.is_error
    (entry,) = log_entries(ops)
    # The SDK tells the client only which tool failed (not the exception); the line says that
    # much, where it said "tool error".
    assert entry["outcome"] == "error: Error executing tool list_claims"
