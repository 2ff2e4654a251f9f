"""Peer results (our engine beside vLLM): the append-only store, the headline row and its
place on the scoreboard, and the benchmark's not-measured record."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from claimbench.bench import peers
from claimbench.harness.claims import load_claims
from claimbench.site.render import render_site

ROOT = Path(__file__).resolve().parents[2]
TPU = {"platform": "tpu", "chip": "v6e", "num_chips": 1}
CPU = {"platform": "cpu", "cpu_model": "Xeon", "host_cpu_count": 2}
GIT = {"sha": "0123456789abcdef0123456789abcdef01234567", "dirty": False}


def result(ours: float, vllm: float) -> dict:
    return {
        "ours": {"mean_tok_s": ours},
        "vllm": {"mean_tok_s": vllm},
        "ratio": ours / vllm,
        "model": "Qwen2.5-7B-Instruct",
        "vllm_version": "vllm-tpu 0.32.0",
    }


def measured(hw: dict, ours: float, vllm: float, day: int) -> dict:
    when = datetime(2026, 11, day, 3, tzinfo=UTC)
    return peers.peer_record(
        "vllm", status=peers.MEASURED, hardware=hw, git=GIT, result=result(ours, vllm), when=when
    )


def test_store_is_append_only_and_read_back_oldest_first(tmp_path: Path) -> None:
    first = peers.store_peer(tmp_path, measured(CPU, 100.0, 50.0, 2))
    again = peers.store_peer(tmp_path, measured(CPU, 120.0, 50.0, 2))  # the same second
    older = peers.store_peer(tmp_path, measured(TPU, 900.0, 1000.0, 1))
    assert first != again and first.read_text() != again.read_text()
    assert {p.name for p in (tmp_path / "peers").iterdir()} == {
        first.name,
        again.name,
        older.name,
    }
    (tmp_path / "peers" / "broken.json").write_text("{not json")
    (tmp_path / "peers" / "partial.json").write_text(json.dumps({"status": "measured"}))
    records = peers.read_peers(tmp_path)
    assert [r["result"]["ours"]["mean_tok_s"] for r in records] == [900.0, 100.0, 120.0]


def test_records_need_their_result_or_reason() -> None:
    with pytest.raises(ValueError, match="needs the reason"):
        peers.peer_record("vllm", status=peers.NOT_MEASURED, hardware=TPU, git=GIT)
    with pytest.raises(ValueError, match="needs the benchmark's result"):
        peers.peer_record("vllm", status=peers.MEASURED, hardware=TPU, git=GIT)


def test_headline_is_the_newest_measurement_per_hardware_class_tpu_first() -> None:
    failed = peers.peer_record(
        "vllm", status=peers.NOT_MEASURED, hardware=TPU, git=GIT, reason="pip failed"
    )
    records = [
        measured(CPU, 100.0, 50.0, 1),
        measured(TPU, 800.0, 1000.0, 2),
        measured(CPU, 90.0, 60.0, 3),
        failed,
    ]
    tpu, cpu = peers.headline(records)
    assert (tpu.evidence, tpu.hardware, tpu.ratio) == ("tpu", "TPU v6e x1", 0.8)
    assert (cpu.evidence, cpu.ours_tok_s, cpu.ratio) == ("cpu", 90.0, 1.5)
    assert cpu.hardware == "CPU (Xeon, 2 cores)" and cpu.commit == GIT["sha"]
    assert peers.latest_attempt(records)["reason"] == "pip failed"
    assert peers.headline([failed]) == []


def index_with(project: Path, records: list[dict] | None) -> str:
    render_site(project, load_claims(project), [], project / "site", peer_records=records)
    return (project / "site" / "index.html").read_text()


def test_scoreboard_headline_row(project: Path) -> None:
    none = index_with(project, None)
    assert 'id="peer-none"' in none and "<strong>not measured</strong>" in none
    # A CPU measurement alone: shown, labelled as CPU, and the TPU still not measured.
    cpu_only = index_with(project, [measured(CPU, 90.0, 60.0, 3)])
    assert 'id="peer-headline"' in cpu_only and "CPU result" in cpu_only
    assert (
        "<strong>1.50×</strong>" in cpu_only and "On TPU: <strong>not measured</strong>" in cpu_only
    )
    failed = peers.peer_record(
        "vllm",
        status=peers.NOT_MEASURED,
        hardware=TPU,
        git=GIT,
        reason="vllm-tpu did not install",
        when=datetime(2026, 11, 4, 3, tzinfo=UTC),
    )
    both = index_with(
        project, [measured(TPU, 800.0, 1000.0, 2), measured(CPU, 90.0, 60.0, 3), failed]
    )
    assert (
        "TPU v6e x1" in both and "<strong>0.80×</strong>" in both and "2026-11-02 03:00 UTC" in both
    )
    assert "On TPU: <strong>not measured</strong>" not in both
    assert "Last attempt, 2026-11-04 03:00 UTC: not measured (vllm-tpu did not install)" in both


@pytest.mark.slow
def test_benchmark_records_a_peer_not_measured(tmp_path: Path) -> None:
    script = ROOT / "benchmarks" / "engine_vs_vllm.py"
    cmd = [sys.executable, str(script), "--store", str(tmp_path), "--not-measured", "no wheel"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (record,) = peers.read_peers(tmp_path)
    assert record["status"] == "not-measured" and record["reason"] == "no wheel"
    assert record["hardware"]["platform"] == "cpu" and len(record["git"]["sha"]) == 40
    alone = subprocess.run(
        [sys.executable, str(script), "--not-measured", "x"], capture_output=True, text=True
    )
    assert alone.returncode == 2 and "--not-measured needs --store" in alone.stderr


def test_a_ratio_of_medians_is_shown_beside_the_medians() -> None:
    record = measured(CPU, 100.0, 50.0, 1)
    record["result"]["ours"]["median_tok_s"] = 110.0
    record["result"]["vllm"]["median_tok_s"] = 40.0
    (row,) = peers.headline([record])
    assert (row.ours_tok_s, row.peer_tok_s) == (110.0, 40.0)


def test_a_cpu_row_says_where_vllms_model_threads_ran(project: Path) -> None:
    older = measured(CPU, 90.0, 60.0, 3)  # before the benchmark set vLLM's cores
    (row,) = peers.headline([older])
    assert row.peer_cores == "vLLM's own binding: one core kept back for its scheduler"
    matched = measured(CPU, 90.0, 70.0, 4)
    matched["result"]["vllm_cores"] = {"mode": "all", "cores": "0,1"}
    (row,) = peers.headline([older, matched])
    assert row.peer_cores == "vLLM on cores 0,1, as ours"
    assert "vLLM on cores 0,1, as ours" in index_with(project, [older, matched])
    (tpu,) = peers.headline([measured(TPU, 800.0, 1000.0, 2)])
    assert tpu.peer_cores == ""


def test_writers_of_one_second_never_take_each_others_name(tmp_path, monkeypatch):
    # Another runner may write between a writer's look at a name and its write: the writer
    # must not trust the look. Every look here says "free"; each record still gets its own
    # file and none is overwritten.
    monkeypatch.setattr(Path, "exists", lambda self: False)
    record = {"time": "2026-12-06T05:00:00+00:00", "peer": "vllm", "status": "not-measured"}
    names = [peers.store_peer(tmp_path, {**record, "n": i}) for i in range(5)]
    assert len(set(names)) == 5
    stored = sorted(json.loads(p.read_text())["n"] for p in (tmp_path / "peers").glob("*.json"))
    assert stored == list(range(5))
    assert not list((tmp_path / "peers").glob(".peer-*"))


def test_a_cpu_records_family_and_model_are_read_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
        "model name\t: AMD EPYC\nprocessor\t: 1\ncpu family\t: 99\nmodel\t\t: 9\n"
    )
    assert peers.cpu_family_model(info) == {"cpu_family": 25, "cpu_model_number": 1}
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\n")
    assert peers.cpu_family_model(info) == {}
    assert peers.cpu_family_model(tmp_path / "absent") == {}
    cpu = {"platform": "cpu", "cpu_model": "AMD EPYC", "host_cpu_count": 2}
    assert peers.hardware_label(cpu) == "CPU (AMD EPYC, 2 cores)"
    host = {"vector_isa": "avx2", "cpu_family": 25, "cpu_model_number": 1}
    assert peers.hardware_label(cpu, host) == "CPU (AMD EPYC family 25 model 1, avx2, 2 cores)"
