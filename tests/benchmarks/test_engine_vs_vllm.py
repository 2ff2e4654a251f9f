"""benchmarks/engine_vs_vllm.py without vLLM: its bad-input lines and the job file the vLLM
worker reads. (The comparison itself needs the vLLM environment: scripts/setup_vllm.sh.)"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

from claimbench.lab.processes import cpu_seconds, process_tree

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "engine_vs_vllm.py"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("engine_vs_vllm", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module by name
    spec.loader.exec_module(module)
    return module


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def test_missing_vllm_is_one_line_and_exit_2(tmp_path):
    missing = tmp_path / "no-venv" / "bin" / "python"
    proc = run("--vllm-python", str(missing))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert str(missing) in proc.stderr and "setup_vllm.sh" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_vllm_python_from_the_environment(tmp_path):
    missing = tmp_path / "elsewhere" / "python"
    proc = run(env={"CLAIMBENCH_VLLM_PYTHON": str(missing), "PATH": ""})
    assert proc.returncode == 2 and str(missing) in proc.stderr


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--rounds", "0"], "--rounds"),
        (["--min-input", "600", "--max-input", "500"], "--min-input"),
        (["--model", "/nonexistent/model"], "--model"),
    ],
)
def test_bad_arguments_are_one_line(args, named):
    proc = run(*args, "--vllm-python", sys.executable)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and named in proc.stderr


def test_job_file_round_trip(tmp_path):
    bench = load_benchmark()
    job = bench.Job(
        model="/models/tiny",
        dtype="float32",
        prompts=[[0, 5, 6], [0, 7]],
        output_len=4,
        max_num_seqs=2,
        max_num_batched_tokens=64,
        max_model_len=8,
    )
    job.write(tmp_path / "job.json")
    assert bench.Job.read(tmp_path / "job.json") == job
    with pytest.raises(ValueError, match="max_model_len 6 < longest request 7"):
        bench.Job(**{**job.__dict__, "max_model_len": 6})


def test_percentiles_and_missing_latencies():
    bench = load_benchmark()
    assert bench.percentiles_ms(None) is None
    # 11 values 0..10 ms: p50 is the 6th, p90 the 10th, p99 rounds to the last.
    p = bench.percentiles_ms([i / 1000 for i in range(11)])
    assert p == pytest.approx({"p50": 5.0, "p90": 9.0, "p99": 10.0})
    rounds = [
        {"output_tokens": 100, "elapsed_s": 2.0, "ttft_s": None, "tpot_s": None},
        {"output_tokens": 100, "elapsed_s": 1.0, "ttft_s": None, "tpot_s": None},
    ]
    summary = bench.summarize(rounds)
    assert summary["tok_s"] == [50.0, 100.0] and summary["mean_tok_s"] == 75.0
    assert summary["ttft_ms"] is None and "n/a" in bench.report(
        {
            **dict.fromkeys(["requests", "min_input", "max_input", "output_len"], 1),
            **dict.fromkeys(["max_num_seqs", "max_num_batched_tokens"], 1),
            "dtype": "float32",
            "attention_backend": "cpu",
            "async_scheduling": "on",
            "vllm_version": "0",
            "ours": summary,
            "vllm": summary,
            "ratio": 1.0,
        }
    )


def test_vllm_gets_the_checkpoint_without_extras_copied_only_when_needed(tmp_path):
    import shutil

    from safetensors import safe_open

    from claimbench.models.checkpoint import default_model_path

    bench = load_benchmark()
    shipped = default_model_path()
    # The shipped model carries early-exit heads beside the Llama tensors: vLLM gets a copy
    # without them.
    copy = bench.llama_only_copy(shipped, tmp_path / "copy")
    assert copy == tmp_path / "copy"
    names = []
    for f in copy.glob("*.safetensors"):
        with safe_open(f, "np") as handle:
            names += handle.keys()  # noqa: SIM118 - a safetensors handle, not a dict
    assert names and all(k.startswith(("model.", "lm_head.")) for k in names)
    # A plain checkpoint (the nightly's 7B) is used where it is.
    plain = tmp_path / "plain"
    plain.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(shipped / name, plain / name)
    assert bench.llama_only_copy(plain, tmp_path / "unused") == plain
    assert not (tmp_path / "unused").exists()


# A parent that sleeps, and its child that spins until a file appears, then sleeps.
SPINNING_CHILD = """
import os, subprocess, sys, time
if sys.argv[1] == "parent":
    child = subprocess.Popen([sys.executable, __file__, "child", sys.argv[2]])
    print(child.pid, flush=True)
    time.sleep(60)
else:
    while not os.path.exists(sys.argv[2]):
        pass
    time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="settle reads Linux /proc")
def test_settle_waits_for_a_descendant_to_stop_spinning(tmp_path):
    bench = load_benchmark()
    script, stop = tmp_path / "spin.py", tmp_path / "stop"
    script.write_text(SPINNING_CHILD)
    parent = subprocess.Popen(
        [sys.executable, str(script), "parent", str(stop)], stdout=subprocess.PIPE, text=True
    )
    try:
        child = int(parent.stdout.readline())
        assert child in process_tree(parent.pid)
        # The parent alone is quiet at once; with its spinning child the wait runs out.
        assert bench.settle(parent.pid, descendants=False) < 2 * bench.SETTLE_WINDOW_S
        assert bench.settle(parent.pid) >= bench.SETTLE_MAX_S
        stop.touch()
        assert bench.settle(parent.pid) < bench.SETTLE_MAX_S
        spent = cpu_seconds(child)
        time.sleep(bench.SETTLE_WINDOW_S)
        assert cpu_seconds(child) - spent < bench.SETTLE_SHARE
    finally:
        parent.kill()
        subprocess.run(["pkill", "-f", str(script)], check=False)
