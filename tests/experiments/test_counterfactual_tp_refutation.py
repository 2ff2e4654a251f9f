"""tp-refutation's counterfactuals at tiny size (the real experiment, one thing changed):
latency_ratio with the larger tp's engine built unsharded, and per_chip_throughput_ratio with
the tp = 1 arm on a slow device (its tp = 2 arm sharded over two virtual CPU devices, in a
process of its own: the device count must precede JAX's backend start), each land on the
other side of their threshold.

latency_ratio is read on devices of known physics (DEVICE: every step takes its roofline time,
split over the engine's real tp; lab/engines/roofline_device.py): this host's virtual devices
share two cores, so sharding is slower there and the registered run reads one side only. On the
modeled devices a sharded tp = 2 arm holds the condition and tp-off moves it past the
threshold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from counterfactual_helpers import assert_fails, assert_holds, metric_values
from tenant_exp_helpers import run_tiny, write_checkpoint

CLAIM = "tp-refutation"
# As tests/sharding_worker.py runs the experiment; unsharded, it needs no virtual devices.
PARAMS = {
    "tps": [1, 2],
    "batch": 4,
    "prompt_len": 8,
    "output_len": 6,
    "engine": {
        "dtype": "float32",
        "page_size": 8,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 32,
        "token_buckets": [32],
        "max_model_len": 64,
    },
}
# The tiny model's 437 kB of float32 weights take 175 ms to read at 2.5 MB/s on one device,
# 87 ms on each of two: far above a tiny step's host work, sharded or not.
DEVICE = {"bytes_per_s": 2.5e6, "flops_per_s": 1e9}


@pytest.mark.slow
def test_without_sharding_the_larger_tp_is_no_faster(tmp_path):
    ctx = run_tiny(
        CLAIM,
        write_checkpoint(tmp_path / "tiny"),
        trials=2,
        base={},
        **PARAMS,
        device=DEVICE,
        counterfactual="tp-off",
    )
    # Both arms' engines are unsharded; the tp=2 arm keeps its label.
    assert [c["tp"] for c in ctx.engine_configs] == [1, 1]
    frame = ctx.measurements_frame("run")
    assert_fails(CLAIM, "latency_ratio", metric_values(frame, "latency_ratio"))


# Run by a fresh interpreter: two virtual CPU devices, then the experiment at tiny size.
SHARDED_RUN = """
import json, sys
import jax
jax.config.update("jax_num_cpu_devices", 2)
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from tenant_exp_helpers import run_tiny, write_checkpoint
params = json.loads(sys.argv[3])
ctx = run_tiny("tp-refutation", write_checkpoint(Path(sys.argv[2]) / "tiny"), **params)
frame = ctx.measurements_frame("run")
print(json.dumps(frame[["metric", "value", "trial"]].to_dict("records")))
"""


def sharded_rows(tmp_path: Path, params: dict) -> list[dict]:
    """The measurements of a tiny run with two virtual CPU devices, in a fresh process."""
    tests = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-c", SHARDED_RUN, str(tests), str(tmp_path), json.dumps(params)],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_sharded_over_modeled_devices_the_larger_tp_holds_the_latency_gain(tmp_path):
    rows = sharded_rows(tmp_path, {"trials": 2, "base": {}, **PARAMS, "device": DEVICE})
    values = [r["value"] for r in rows if r["metric"] == "latency_ratio"]
    assert len(values) == 2
    assert_holds(CLAIM, "latency_ratio", values)


@pytest.mark.slow
def test_a_slow_single_chip_raises_per_chip_throughput_past_the_bound(tmp_path):
    params = {"trials": 2, "base": {}, **PARAMS, "counterfactual": "one-chip-slow"}
    rows = sharded_rows(tmp_path, params)
    values = [r["value"] for r in rows if r["metric"] == "per_chip_throughput_ratio"]
    assert len(values) == 2
    assert_fails(CLAIM, "per_chip_throughput_ratio", values)
