"""benchmarks/step_profile.py: ops named by their FFI target, steps matched to the engine's
records, and a profiled round of our engine at a tiny size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import step_profile as sp  # noqa: E402

SCRIPT = Path(sp.__file__)
# One round of the workload (argv after the benchmarks' folder) through our engine, its
# programs left in the persistent compilation cache the environment names.
WARM_CACHE = """
import sys
sys.path.insert(0, sys.argv[1])
import engine_vs_vllm as ev
args = ev.parse_args([*sys.argv[2:], "--vllm-python", sys.executable])
job = ev.make_job(args)
ev.ours_round(ev.build_ours(args, job), job)
"""


def test_ffi_targets_are_read_from_the_dumped_programs(tmp_path):
    (tmp_path / "module_0102.jit_step_fn.cpu_after_optimizations.txt").write_text(
        "  ffi_call.49 = f32[64,256]{1,0} custom-call(x, w), "
        'custom_call_target="claimbench_dense", api_version=API_VERSION_TYPED_FFI\n'
        '  %ffi_call.7 = f32[8]{0} custom-call(q), custom_call_target="claimbench_paged_decode"\n'
        "  wrapped_add = f32[64,256]{1,0} fusion(a, b), kind=kLoop\n"
    )
    (tmp_path / "module_0102.jit_step_fn.cpu_after_optimizations-buffer-assignment.txt").write_text(
        'ffi_call.1 = custom_call_target="not_a_program"\n'
    )
    targets = sp.ffi_targets(str(tmp_path))
    assert targets == {
        (102, "ffi_call.49"): "claimbench_dense",
        (102, "ffi_call.7"): "claimbench_paged_decode",
    }
    assert sp.op_kind("ffi_call.49", 102, targets) == "claimbench_dense"
    # The same name in another program is not that program's call.
    assert sp.op_kind("ffi_call.49", 7, targets) == "xla:ffi_call"
    assert sp.op_kind("wrapped_add.3", 102, targets) == "xla:wrapped_add"


def test_steps_are_split_by_the_engines_records():
    runs = [
        {"start_ns": 0, "span_ns": 4e6, "ops": {"claimbench_dense": 3e6, "xla:add": 1e6}},
        {"start_ns": 10, "span_ns": 2e6, "ops": {"claimbench_dense": 1e6, "xla:add": 1e6}},
        {"start_ns": 20, "span_ns": 3e6, "ops": {"claimbench_dense": 2e6}},
    ]
    records = [
        SimpleNamespace(num_prefill_tokens=30, device_s=0.004),
        SimpleNamespace(num_prefill_tokens=0, device_s=0.002),
        SimpleNamespace(num_prefill_tokens=0, device_s=0.003),
    ]
    out = sp.breakdown(runs, records)
    assert out["prefill"]["steps"] == 1 and out["decode"]["steps"] == 2
    assert out["decode"]["ops_ms"] == {"claimbench_dense": 1.5, "xla:add": 0.5}  # means a step
    assert out["decode"]["ops_ms_sum"] == 2.0
    assert out["decode"]["span_ms_mean"] == 2.5
    assert out["decode"]["device_ms_median"] == pytest.approx(2.5)
    assert out["prefill"]["ops_ms"] == {"claimbench_dense": 3.0, "xla:add": 1.0}
    with pytest.raises(SystemExit, match="cannot be matched"):
        sp.breakdown(runs, records[:2])
    text = sp.report(out)
    assert text.splitlines()[0].startswith("decode steps: 2, device 2.50 ms a step")
    assert "1.500 ms   75.0%  claimbench_dense" in text


def test_a_decode_steps_calls_are_read_position_by_position():
    a, b = "claimbench_dense", "claimbench_paged_decode"
    runs = [
        {"calls": [[a, 3e6]]},  # a prefill step: not counted
        {"calls": [[a, 10e3], [b, 40e3], [a, 800e3]]},
        {"calls": [[a, 20e3], [b, 60e3], [a, 600e3]]},
        {"calls": [[a, 30e3], [b, 50e3], [a, 700e3]]},
        {"calls": [[b, 1e3]]},  # another sequence of calls, made by fewer steps
    ]
    records = [SimpleNamespace(num_prefill_tokens=n) for n in (30, 0, 0, 0, 0)]
    out = sp.call_positions(runs, records)
    assert out["steps"] == 3
    assert [(c["kind"], c["median_us"], c["mean_us"]) for c in out["calls"]] == [
        (a, 20.0, 20.0),
        (b, 50.0, 50.0),
        (a, 700.0, 700.0),
    ]
    text = sp.report({"decode_calls": out}, calls=True).splitlines()
    assert text[0] == "a decode step's native calls in order (3 steps alike):"
    assert text[3].split()[:3] == ["2", a, "700.0"]
    assert sp.call_positions(runs[:1], records[:1]) is None  # no decode step


@pytest.mark.slow
def test_a_tiny_round_is_profiled(tmp_path):
    from claimbench.kernels import native_dense

    workload = ["--requests", "3", "--min-input", "8", "--max-input", "24", "--output-len", "4"]
    workload += ["--max-num-seqs", "4", "--max-num-batched-tokens", "32"]
    # A persistent compilation cache already holding the round's programs (as the suite's
    # shared one may): they must still be compiled, and dumped, to name the native calls.
    cache = {
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }
    warm = [sys.executable, "-c", WARM_CACHE, str(SCRIPT.parent), *workload]
    subprocess.run(warm, env={**os.environ, **cache}, timeout=600, check=True, capture_output=True)
    assert any(tmp_path.iterdir()), "the warm-up stored no programs"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *workload, "--json"],
        env={**os.environ, **cache},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # Three prompts of 8-24 tokens in steps of 32: prefill steps, then decode-only steps.
    assert result["prefill"]["steps"] >= 1 and result["decode"]["steps"] >= 1
    for kind in (result["decode"], result["prefill"]):
        assert kind["ops_ms_sum"] == pytest.approx(sum(kind["ops_ms"].values()))
    if native_dense.unavailable_reason() is None:
        # The native kernels, read back to their targets: the matmuls in every step.
        assert "claimbench_dense" in result["decode"]["ops_ms"]
        assert "claimbench_dense" in result["prefill"]["ops_ms"]
        # Position by position, a decode step's native calls: each layer's attention and
        # gated MLP once, its q, k, v, o and down, and the head after the last layer.
        kinds = [c["kind"] for c in result["decode_calls"]["calls"]]
        layers = kinds.count("claimbench_paged_decode")
        assert layers >= 1 and kinds.count("claimbench_dense_gated") == layers
        assert kinds.count("claimbench_dense") == 5 * layers + 1
