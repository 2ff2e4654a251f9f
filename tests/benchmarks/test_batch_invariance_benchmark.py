"""benchmarks/batch_invariance.py runs at a tiny size: two bf16 engines in turn, and the check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from claimbench.kernels import native_dense

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "batch_invariance.py"

pytestmark = pytest.mark.skipif(
    native_dense.unavailable_reason() is not None, reason="the native kernels cannot build here"
)


@pytest.mark.slow
def test_batch_invariance_benchmark_runs_side_by_side():
    workload = "--requests 3 --min-input 8 --max-input 24 --output-len 4 --max-num-seqs 8"
    cmd = [sys.executable, str(SCRIPT), "--rounds", "1", "--workload", workload, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(report["rounds"]) == {"default", "invariant"}
    assert all(len(r["tok_s"]) == 1 for r in report["rounds"].values())
    assert report["identical_alone_vs_beside"]["invariant"] == {"tokens": True, "logprobs": True}
