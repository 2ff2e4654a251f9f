"""benchmarks/tensor_parallel.py: the collective share read from a trace, and a tiny run."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "tensor_parallel.py"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("tensor_parallel_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_collective_share_counts_only_collective_ops(tmp_path) -> None:
    events = [
        {"ph": "X", "name": "fusion.3", "dur": 60, "args": {"hlo_op": "fusion.3"}},
        {"ph": "X", "name": "all-reduce.1", "dur": 30, "args": {"hlo_op": "all-reduce.1"}},
        {"ph": "X", "name": "all-gather.2", "dur": 10, "args": {"hlo_op": "all-gather.2"}},
        # Host-side events (no HLO op) are not device time.
        {"ph": "X", "name": "PjitFunction(step_fn)", "dur": 500, "args": {}},
    ]
    trace = tmp_path / "plugins" / "profile" / "run" / "host.trace.json.gz"
    trace.parent.mkdir(parents=True)
    with gzip.open(trace, "wt") as f:
        json.dump({"traceEvents": events}, f)
    assert load_benchmark().collective_share(tmp_path) == pytest.approx(0.4)
    assert load_benchmark().collective_share(tmp_path / "plugins" / "none") is None


@pytest.mark.slow
def test_benchmark_runs_side_by_side_at_tiny_size() -> None:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    cmd = [sys.executable, str(SCRIPT), "--tps", "1,2", "--batch", "2", "--input-len", "8"]
    # A 16-token step budget: one token bucket to precompile (the 2 x 8 prompt tokens fit).
    cmd += ["--output-len", "4", "--repeats", "1", "--max-num-batched-tokens", "16", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [r["setting"] for r in rows] == ["unsharded", "tp=1", "tp=2"]
    assert [r["describe"]["tp"] for r in rows] == [1, 1, 2]
    assert all(r["same_tokens_as_unsharded"] for r in rows)
    assert rows[0]["step_vs_unsharded"] == 1.0
    assert rows[2]["tokens_per_s_per_device"] == pytest.approx(rows[2]["tokens_per_s"] / 2)
