"""benchmarks/attention_kernel.py runs at a tiny size and times the XLA and native paths."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from claimbench.kernels import native_attention

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "attention_kernel.py"


@pytest.mark.slow
@pytest.mark.parametrize("kv_dtype", ["f32", "int8"])
def test_attention_benchmark_runs_side_by_side(kv_dtype):
    tiny = "--num-q-heads 4 --num-kv-heads 2 --head-dim 16 --decode-seqs 3 --context-len 40"
    cmd = [sys.executable, str(SCRIPT), "--kv-dtype", kv_dtype, "--chunk-len", "24"]
    cmd += [*tiny.split(), "--prefill-seqs", "2", "--iters", "2", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    impls = {(r["batch"], r["impl"]) for r in report["results"]}
    expected = {"xla"} | ({"native"} if native_attention.unavailable_reason() is None else set())
    assert impls == {(b, i) for b in ("decode-heavy", "prefill-heavy") for i in expected}
    assert all(r["ms"] > 0 and r["bytes_moved"] > 0 for r in report["results"])
