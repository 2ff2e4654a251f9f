"""benchmarks/dense_matmul.py runs at a tiny size: both matmuls, and two engines in turn."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from claimbench.kernels import native_dense

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "dense_matmul.py"

pytestmark = pytest.mark.skipif(
    native_dense.unavailable_reason() is not None, reason="the native kernels cannot build here"
)


@pytest.mark.slow
def test_dense_benchmark_runs_side_by_side():
    workload = "--requests 3 --min-input 8 --max-input 24 --output-len 4"
    # Room for the three requests and no more: each engine precompiles its buckets, and the
    # default budget (64 sequences, 2,048 tokens) would compile dozens of programs twice.
    workload += " --max-num-seqs 4 --max-num-batched-tokens 32"
    cmd = [sys.executable, str(SCRIPT), "--rows", "1", "13", "--repeats", "1", "--iters", "1"]
    cmd += ["--engine-rounds", "1", "--workload", workload, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    # The layers' matrices and the head apart, at each row count.
    assert [(m["rows"], m["matrices"]) for m in report["matmuls"]] == [
        (1, "layers"),
        (1, "head"),
        (13, "layers"),
        (13, "head"),
    ]
    assert all(set(m["ms"]) == {"xla", "native"} for m in report["matmuls"])
    for m in report["matmuls"]:  # the kernel on each thread count against the peak on as many
        assert set(m["threads"]) == {"1", "2"}
        for r in m["threads"].values():
            assert r["fraction"] == pytest.approx(r["gflop_s"] / r["peak_gflop_s"])
            assert r["cold_fraction"] == pytest.approx(r["cold_gflop_s"] / r["peak_gflop_s"])
            assert r["gflop_s"] > 0 and r["peak_gflop_s"] > 0
    engine = report["engine"]
    assert set(engine["rounds"]) == {"native", "xla"}
    assert engine["identical_outputs"].endswith("/3")  # compared over all three requests
    assert all(len(r["tok_s"]) == 1 for r in engine["rounds"].values())


def test_the_eviction_reads_four_times_the_last_level_cache(monkeypatch, tmp_path):
    sys.path.insert(0, str(SCRIPT.parent))
    import dense_matmul

    from claimbench.kernels import native_bandwidth

    size = tmp_path / "size"
    monkeypatch.setattr(native_bandwidth, "L3_SIZE_FILE", size)
    size.write_text("32768K\n")  # a 32 MiB L3
    assert dense_matmul.evict_bytes() == 128 << 20
    size.write_text("491520K\n")  # 480 MiB, which glibc's sysconf did not know on one host
    assert dense_matmul.evict_bytes() == 1920 << 20
    size.write_text("8192K\n")  # a small L3: the floor
    assert dense_matmul.evict_bytes() == dense_matmul.MIN_EVICT_BYTES
    evict = dense_matmul.evictor()  # reads the whole buffer of ones
    assert evict() == dense_matmul.MIN_EVICT_BYTES // 4
