"""cold-start: how long a fresh process takes to serve its first token, and what fixes it.

Each trial launches fresh Python processes (lab/probes/cold_start_probe.py), each building the
same engine (the run's model, dtype and the profile's ``engine`` params) and serving one
first request (``first_prompt_len`` tokens, ``max_tokens`` out) and then a workload that
takes every path a request can (``workload_prompt_lens`` under each sampling setting, with
log-probs, prompt log-probs and stop tokens, alone and mixed in one batch, then prefix hits;
cold_start_probe.serving_batches; speculative steps whenever the profile's engine
speculates), in an order rotated by trial:

* cold: no precompile and no persistent compilation cache: the first request compiles the
  buckets it needs while it is served;
* precompile: every bucket compiled before the first request, no persistent cache;
* cached: every bucket compiled before the first request, from a persistent compilation cache
  that one process of the same engine filled before the first trial (a temporary directory).

A process's cold start is the wall time from just before the parent launched it to its first
token: interpreter start, imports, model load, compilation and the first request, everything a
restarted server pays. The warm reference is the first request's TTFT on an engine of this
process that is already compiled and has served once (emptied first, so no cached prefix).

* cold_over_warm_first_ttft = the cold process's first-request TTFT, read from its own request
  record (arrival to first token, so the compiles that request needs and nothing before it:
  interpreter start, imports and model load, which would make the ratio hundreds whatever
  compilation costs, are left out) / the warm TTFT; the whole cold start over the warm TTFT is
  kept beside it as ``cold_start_s``;
* cache_speedup = precompile's cold start / cached's cold start;
* compiles_during_serving = XLA programs built while serving in the precompile and cached
  processes, counted from JAX's own compile events (lab/probes/compile_events.py: whatever code
  path asked for them, not only the runner's bucket keys), first request to last: a "never"
  condition, so any compilation in any trial fails it. Its positive control,
  compiles_during_serving_control, is the same count in the cold process (precompile off),
  which must compile while serving: a zero there would mean the counter sees nothing.

Compile seconds per bucket are recorded from the cold process's step records (its first step
at a bucket, less the median of its later steps there) and, for precompile, as precompile's
seconds over its programs. Everything is timing on the host's compiler (XLA:CPU here, XLA/TPU
or Mosaic on a TPU), so on a CPU the values are indicative only, as the claim's scope says.

Why it can come out either way: on a CPU, imports and model load may dominate the cold start
(so the cache buys little); on a TPU, compilation of real buckets may take minutes. A warm
TTFT is one short prefill step, so the cold/warm ratio depends on how long compiling the
first request's buckets takes against it (a small step program may compile in less than ten
steps' time); and compilations while serving count whatever the code path compiles
lazily (a sampling or logprob variant, say) that precompile did not cover.

Counterfactuals (``counterfactual``, lab/engines/counterfactuals.py), each one mechanism off:
``cold-precompiled`` (the cold process compiles every bucket before its first request: no
compile is left for the first request, so its TTFT is a warm one), ``precompile-off`` (the
precompile and cached processes compile nothing ahead: serving compiles) and ``cache-off``
(the cached process gets no persistent cache: it compiles like precompile's).

Params (claims.yaml, per profile): engine, first_prompt_len, max_tokens,
workload_prompt_lens, timeout_s (per process), counterfactual.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.engines import counterfactuals
from claimbench.lab.load import tenant_runs as tr

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "first_prompt_len": 48,
    "max_tokens": 8,
    "workload_prompt_lens": [4, 24, 100, 300],
    "timeout_s": 900,
    "counterfactual": counterfactuals.NONE,
}
COUNTERFACTUALS = ("cold-precompiled", "precompile-off", "cache-off")
ARMS = ("cold", "precompile", "cached")
# Environment variables that would switch a persistent cache on behind the arms' backs.
CACHE_ENV = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")


def launch(spec: dict[str, Any], timeout_s: float) -> tuple[float, dict[str, Any]]:
    """Run one cold_start_probe process on ``spec``: (seconds from launch to its first token,
    its report). RuntimeError with its stderr's tail when it fails."""
    env = {k: v for k, v in os.environ.items() if k not in CACHE_ENV}
    command = [sys.executable, "-m", "claimbench.lab.probes.cold_start_probe", json.dumps(spec)]
    launched = time.time()
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"cold-start probe failed ({done.returncode}): {done.stderr[-2000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return report["first_token_wall"] - launched, report


def arm_spec(
    config: dict[str, Any],
    arm: str,
    cache_dir: str,
    prompts: dict[str, Any],
    counterfactual: str = counterfactuals.NONE,
) -> dict[str, Any]:
    """The probe spec of ``arm`` (cold, precompile, cached or fill), with ``counterfactual``'s
    one mechanism switched off (the fill process is never changed)."""
    cached = arm == "fill" or (arm == "cached" and counterfactual != "cache-off")
    precompile = arm != "cold"
    if counterfactual == "cold-precompiled" and arm == "cold":
        precompile = True
    if counterfactual == "precompile-off" and arm in ("precompile", "cached"):
        precompile = False
    return {
        "config": config | {"compilation_cache_dir": cache_dir if cached else None},
        "precompile": precompile,
        **prompts,
    }


def warm_first_ttft(engine: LLMEngine, prompt: list[int], max_tokens: int) -> float:
    """TTFT of ``prompt`` on the already compiled engine, emptied first (no cached prefix)."""
    engine.reset()
    engine.generate([prompt], SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    return float(engine.requests_frame().iloc[0]["ttft_s"])


def bucket_compile_s(buckets: list[dict[str, Any]]) -> dict[tuple[int, int], float]:
    """Per bucket that ran more than once: its first step's seconds less its later median."""
    return {
        (b["token_bucket"], b["seq_bucket"]): b["first_s"] - b["later_median_s"]
        for b in buckets
        if b["later_median_s"] is not None
    }


def run(ctx: RunContext) -> None:
    """Record cold_over_warm_first_ttft, cache_speedup and compiles_during_serving per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    counterfactual = counterfactuals.chosen(params, COUNTERFACTUALS)
    warm = ctx.engine(precompile=True)
    config = {"model_path": str(ctx.model_path), "dtype": ctx.dtype, "seed": ctx.seed}
    config |= params["engine"]
    vocab = warm.model_cfg.vocab_size
    with tempfile.TemporaryDirectory(prefix="claimbench-cold-start-") as cache_dir:
        rng = np.random.default_rng([ctx.seed, 0])
        fill = {
            "first_prompt": rng.integers(3, vocab, params["first_prompt_len"]).tolist(),
            "max_tokens": params["max_tokens"],
            "workload": [
                rng.integers(3, vocab, n).tolist() for n in params["workload_prompt_lens"]
            ],
        }
        fill_s, _ = launch(arm_spec(config, "fill", cache_dir, fill), params["timeout_s"])
        for trial in range(ctx.trials):
            rng = np.random.default_rng([ctx.seed, trial + 1])
            prompts = {
                "first_prompt": rng.integers(3, vocab, params["first_prompt_len"]).tolist(),
                "max_tokens": params["max_tokens"],
                "workload": [
                    rng.integers(3, vocab, n).tolist() for n in params["workload_prompt_lens"]
                ],
            }
            start_s, reports = {}, {}
            for arm in tr.rotated(list(ARMS), trial):
                spec = arm_spec(config, arm, cache_dir, prompts, counterfactual)
                start_s[arm], reports[arm] = launch(spec, params["timeout_s"])
            warm_s = warm_first_ttft(warm, prompts["first_prompt"], params["max_tokens"])
            _record_trial(ctx, trial, start_s, reports, warm_s, fill_s)


def _record_trial(
    ctx: RunContext,
    trial: int,
    start_s: dict[str, float],
    reports: dict[str, dict[str, Any]],
    warm_s: float,
    fill_s: float,
) -> None:
    """The trial's three conditions and the side metrics behind them."""
    cold_ttft_s = reports["cold"]["first_ttft_s"]
    ctx.record(
        "cold_over_warm_first_ttft",
        cold_ttft_s / warm_s,
        trial=trial,
        unit="x",
        cold_first_ttft_s=cold_ttft_s,
        warm_first_ttft_s=warm_s,
        cold_start_s=start_s["cold"],
    )
    ctx.record(
        "cache_speedup",
        start_s["precompile"] / start_s["cached"],
        trial=trial,
        unit="x",
        precompile_start_s=start_s["precompile"],
        cached_start_s=start_s["cached"],
        fill_start_s=fill_s,
    )
    serving = {arm: reports[arm]["compiles_during_serving"] for arm in ("precompile", "cached")}
    runner = {
        f"runner_{arm}": reports[arm]["runner_compiles_during_serving"]
        for arm in ("precompile", "cached")
    }
    ctx.record(
        "compiles_during_serving",
        sum(serving.values()),
        trial=trial,
        unit="programs",
        **serving,
        **runner,
        prefix_hit_tokens=reports["precompile"]["prefix_hit_tokens"],
        # Which programs, when any: the function each compile event named.
        built=[name for arm in serving for name in reports[arm]["programs_built_while_serving"]],
    )
    cold = reports["cold"]
    ctx.record(
        "compiles_during_serving_control",
        cold["compiles_during_serving"],
        trial=trial,
        unit="programs",
        arm="cold",
        runner_cold=cold["runner_compiles_during_serving"],
    )
    ctx.record("warm_first_ttft_s", warm_s, trial=trial, unit="s")
    for arm, report in reports.items():
        ctx.record("start_to_first_token_s", start_s[arm], trial=trial, unit="s", arm=arm)
        ctx.record("precompile_s", report["precompile_s"], trial=trial, unit="s", arm=arm)
        ctx.record(
            "programs_compiled", report["num_compilations"], trial=trial, unit="programs", arm=arm
        )
    precompile = reports["precompile"]
    ctx.record(
        "compile_s_per_bucket",
        precompile["precompile_s"] / max(precompile["num_precompiled"], 1),
        trial=trial,
        unit="s",
        arm="precompile",
        num_programs=precompile["num_precompiled"],
    )
    for (tokens, seqs), seconds in bucket_compile_s(reports["cold"]["buckets"]).items():
        ctx.record(
            "bucket_compile_s",
            seconds,
            trial=trial,
            unit="s",
            arm="cold",
            token_bucket=tokens,
            seq_bucket=seqs,
        )


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """Seconds from launch to first token per process kind, beside the warm first TTFT
    (newest run; bars are means over trials, dots the trials), on a log axis."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    from claimbench.lab.figures.svg import figure_to_svg

    for run_dir in reversed(run_dirs):
        path = Path(run_dir) / "measurements.parquet"
        rows = pd.read_parquet(path) if path.is_file() else pd.DataFrame()
        if len(rows) and "start_to_first_token_s" in set(rows["metric"]):
            break
    else:
        return []
    starts = rows[rows["metric"] == "start_to_first_token_s"]
    kinds = [json.loads(x)["arm"] for x in starts["labels"]]
    values = {arm: starts["value"][[k == arm for k in kinds]].to_numpy() for arm in ARMS}
    values["warm TTFT"] = rows.loc[rows["metric"] == "warm_first_ttft_s", "value"].to_numpy()
    with rc_context({"svg.fonttype": "none", "font.size": 9}):
        fig = Figure(figsize=(5.0, 3.2))
        ax = fig.add_subplot()
        for x, seconds in enumerate(values.values()):
            ax.bar(x, seconds.mean(), color="#2166ac" if x < len(ARMS) else "#1b7837")
            ax.scatter(np.full(len(seconds), x), seconds, s=10, color="#333333", zorder=3)
        ax.set_xticks(range(len(values)), list(values))
        ax.set_yscale("log")
        ax.set_ylabel("seconds to the first token")
        ax.grid(alpha=0.3, axis="y")
        svg = figure_to_svg(fig)
    return [("Cold start: process launch to first token, and a warm engine's first TTFT", svg)]
