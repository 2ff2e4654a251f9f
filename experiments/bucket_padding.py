"""bucket-padding: the padding and compiled programs of power-of-two step buckets on a trace.

Each trial serves one realistic trace on the real engine and reads its step records: every
step's scheduled tokens, its sequences and the (token, sequence) bucket pair it ran at. The
trace is the workload generator's: gamma arrivals (``burstiness`` < 1: bursty) at ``load`` x
the saturation read by the trials before it (lab/load/service_rate.py: closed bursts, their
median), offering exactly that work for the time the engine needs to serve
``episode_requests`` requests at saturation (service units), then drained; the realised
load, against the two bursts bracketing the trial's own serve, is recorded, and a trial more
than ``load_tolerance`` off ``load`` is reported, not scored. Prompt lengths are
the held-out corpus's documents in the served model's tokenizer (one source file per request,
clipped to ``prompt_len`` as a code assistant truncates a file to its context); output lengths
are lognormal.

What is measured and what is arithmetic:

* padding_waste_pct (measured): the engine's padding tokens over its computed (padded) tokens,
  summed over the steps that started between the first and the last arrival (the drain after
  arrivals stop is the finite trace's artefact), read from the step records. It is measured
  because the step sizes are: how many decode and prefill tokens share a step depends on
  arrivals, step times and the scheduler, so it moves with the load, the burstiness and the
  hardware (on a CPU a decode step of two sequences is far cheaper than a full prefill step,
  so fewer sequences overlap than on an accelerator, where decode steps cost about the same
  whatever their batch).
* num_programs (analytic): the claim counts compiled step programs, and the engine compiles
  one program per (token bucket, sequence bucket) pair ahead of serving (precompile), so the
  count is the pairs (17 for a 512-token budget and 32 sequences: 6 token buckets by 3
  sequence buckets, less the pairs with more sequences than tokens), arithmetic on its config
  and recorded once with its inputs, the token buckets alone (6) among them.
  ``programs_used`` (measured) is how many pairs the trace touched, and
  ``compiles_while_serving`` checks that serving compiled none.
* The curve (measured): the same trace served again by engines configured with other token
  buckets (EngineConfig.token_buckets; the engine's sequence buckets kept): geometric buckets
  at ``ratios`` (2 is the engine's powers of two, whose serving is the measurement above) and
  histogram buckets (``histogram_buckets`` token buckets each, the largest the step budget)
  picked to pad least on the steps the engine served in the first trial, then held for every
  trial (from the second trial on, traces they were not fitted to). Each policy's padding is
  read from its own engine's step records over the arrival window, its program count from its
  runner (the step variants precompile compiled), and a check that its serving compiled none.

Why it can come out either way: padding is what the trace leaves after the scheduler fills
steps. Under load, chunked prefill fills steps to the budget (a bucket, so no padding); between
bursts, decode-only steps of a few sequences pad up to the next power of two and to the
sequence bucket's floor. Which dominates is the trace's, at the pre-registered load.

Counterfactual (``counterfactual``, lab/engines/counterfactuals.py): ``one-bucket`` serves the trace
on an engine with a single token bucket, the step budget (one static shape, as a server without
buckets pads every step to), in place of the powers of two.

Params (claims.yaml, per profile): engine, compile_cache, load, burstiness, prompt_len ([lo,
hi] clip of the document lengths), output_mean, output_sigma, output_max, episode_requests,
saturation_requests, ratios, histogram_buckets, counterfactual.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from claimbench.engine.config import MIN_TOKEN_BUCKET
from claimbench.engine.worker.buckets import bucket_pairs, seq_buckets, token_buckets
from claimbench.lab.engines import counterfactuals
from claimbench.lab.load import open_loop, service_rate
from claimbench.lab.load import tenant_runs as tr
from claimbench.lab.metrics.bucket_policies import (
    BucketPolicy,
    fit_histogram_buckets,
    geometric_buckets,
)
from claimbench.models.tokenizer import Tokenizer
from claimbench.workload.corpus import heldout_texts
from claimbench.workload.lengths import EmpiricalLength, LognormalLength
from claimbench.workload.spec import WorkloadSpec
from claimbench.workload.tenants import TenantLoad

if TYPE_CHECKING:
    from claimbench.engine.config import EngineConfig
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "compile_cache": True,
    "load": 0.7,
    "load_tolerance": 0.25,  # realised load within 25% of load, or not scored
    "burstiness": 0.5,
    "prompt_len": [16, 512],
    "output_mean": 128.0,
    "output_sigma": 1.0,
    "output_max": 512,
    "episode_requests": 64,
    "saturation_requests": 64,
    "ratios": [4.0, 2.0, 1.5],
    "histogram_buckets": [2, 4, 8],
    "counterfactual": counterfactuals.NONE,
}


def document_lengths(model_path: Path) -> tuple[int, ...]:
    """Token count of every held-out document in the model's tokenizer."""
    tokenizer = Tokenizer.from_dir(model_path)
    return tuple(max(1, len(ids)) for ids in tokenizer.encode_batch(heldout_texts()))


def trace_spec(params: dict[str, Any], doc_lengths: tuple[int, ...], seed: int) -> WorkloadSpec:
    """One gamma tenant (rate scaled later) with the held-out length mix."""
    lo, hi = params["prompt_len"]
    tenant = TenantLoad(
        "trace",
        arrival="gamma",
        rate=1.0,
        burstiness=params["burstiness"],
        prompt_len=EmpiricalLength(doc_lengths, lo=lo, hi=hi),
        output_len=LognormalLength(
            mean=params["output_mean"], sigma=params["output_sigma"], lo=1, hi=params["output_max"]
        ),
    )
    return WorkloadSpec((tenant,), seed=seed, max_requests=params["saturation_requests"])


ENGINE_POLICY = "engine (powers of two)"


def engine_policy(cfg: EngineConfig) -> BucketPolicy:
    """The engine's own buckets."""
    return BucketPolicy(ENGINE_POLICY, token_buckets(cfg), seq_buckets(cfg))


def geometric_policies(params: dict[str, Any], cfg: EngineConfig) -> list[BucketPolicy]:
    """Geometric token buckets at each of ``ratios`` (the engine's sequence buckets)."""
    budget, seqs = cfg.scheduler.max_num_batched_tokens, seq_buckets(cfg)
    return [
        BucketPolicy(f"geometric x{r:g}", geometric_buckets(MIN_TOKEN_BUCKET, budget, r), seqs)
        for r in params["ratios"]
    ]


def histogram_policies(
    params: dict[str, Any], cfg: EngineConfig, steps: pd.DataFrame
) -> list[BucketPolicy]:
    """Token buckets fitted to the sizes ``steps`` (served by the engine) needed: for each of
    ``histogram_buckets``, the set of that many that pads those steps least."""
    budget, seqs = cfg.scheduler.max_num_batched_tokens, seq_buckets(cfg)
    needed = engine_policy(cfg).needed_tokens(steps["num_scheduled_tokens"], steps["num_seqs"])
    return [
        BucketPolicy(f"histogram {k}", fit_histogram_buckets(needed, k, budget), seqs)
        for k in params["histogram_buckets"]
    ]


@dataclass(frozen=True)
class PolicyServed:
    """One bucket policy's engine serving one trace."""

    served: tr.ServedRun
    steps: pd.DataFrame  # the arrival window's steps
    programs: int  # step variants its runner compiled ahead of serving
    compiles: int  # step variants compiled while serving (0: precompile covered every step)


def serve_with(engine: LLMEngine, requests: list, timeout_s: float) -> PolicyServed:
    """Serve ``requests`` on a precompiled ``engine``: its padding and programs as measured."""
    programs = engine.stats().num_compilations
    served = tr.serve(engine, requests, timeout_s)
    compiles = engine.stats().num_compilations - programs
    return PolicyServed(served, arrival_window(served), programs, compiles)


def arrival_window(served: tr.ServedRun) -> pd.DataFrame:
    """The steps that started between the first and the last arrival: the trace in steady
    state, without the drain after arrivals stop (an artefact of a finite trace)."""
    start, end = served.requests["arrival_s"].min(), served.requests["arrival_s"].max()
    steps = served.steps
    window = steps[(steps["start_s"] >= start) & (steps["start_s"] <= end)]
    if window.empty:
        raise ValueError(
            f"no step started between the first and last arrival ({start:.3f}..{end:.3f} s): "
            "serve more episode_requests"
        )
    return window.reset_index(drop=True)


def measured_padding_pct(steps: pd.DataFrame) -> float:
    """The engine's padding tokens over its computed (padded) tokens, from its step records."""
    return 100.0 * float(steps["num_padding_tokens"].sum()) / float(steps["token_bucket"].sum())


def run(ctx: RunContext) -> None:
    """Record num_programs once (analytic) and padding_waste_pct per trial, with each bucket
    policy's served policy_padding_pct (its programs and compiles beside), programs_used and
    compiles_while_serving."""
    params = ctx.merged(DEFAULT_PARAMS)
    counterfactual = counterfactuals.chosen(params, ("one-bucket",))
    engine = ctx.engine(precompile=True, compile_cache=params["compile_cache"])
    if counterfactual == "one-bucket":
        budget = engine.config.scheduler.max_num_batched_tokens
        del engine  # its KV pool goes before the one-bucket engine's
        engine = ctx.engine(
            precompile=True, compile_cache=params["compile_cache"], token_buckets=(budget,)
        )
    cfg, vocab = engine.config, engine.model_cfg.vocab_size
    pairs = bucket_pairs(cfg)
    ctx.record_analytic(
        "num_programs",
        len(pairs),
        unit="programs",
        inputs={
            "token_buckets": list(token_buckets(cfg)),
            "seq_buckets": list(seq_buckets(cfg)),
            "num_token_buckets": len(token_buckets(cfg)),
            "rule": "one program per (token, seq) bucket pair with seq <= token",
        },
    )
    doc_lengths = document_lengths(ctx.model_path)
    fitted: list[BucketPolicy] | None = None
    meter = service_rate.SaturationMeter(engine, params["saturation_requests"])
    for trial in range(ctx.trials):
        spec = trace_spec(params, doc_lengths, tr.trial_seed(ctx, trial))
        saturation = meter.pace(spec)
        phase = tr.Phase(params["episode_requests"], params["load"])
        requests = tr.phased_requests(spec, saturation, [phase], vocab)
        engine.reset()
        timeout_s = tr.safety_timeout_s(saturation.seconds_for(params["episode_requests"]))
        own = serve_with(engine, requests, timeout_s)
        ctx.save_frames(
            requests=own.served.requests, steps=own.served.steps, trial=trial, policy=ENGINE_POLICY
        )
        service = meter.measure(spec)
        open_loop.record_episode_load(ctx, trial, requests, saturation, service, params)
        labels = {
            "load": params["load"],
            "paced_tok_s": saturation.output_tokens_per_s,
            "saturation_tok_s": service.output_tokens_per_s,
            "num_requests": len(requests),
            "num_steps": len(own.steps),  # in the arrival window
            "timed_out": own.served.timed_out,
        }
        padding = measured_padding_pct(own.steps)
        ctx.record("padding_waste_pct", padding, trial=trial, unit="%", **labels)
        used = own.steps[["token_bucket", "seq_bucket"]].drop_duplicates()
        ctx.record("programs_used", len(used), trial=trial, unit="programs", **labels)
        ctx.record("compiles_while_serving", own.compiles, trial=trial, unit="programs")
        if fitted is None:
            fitted = histogram_policies(params, cfg, own.steps)
        for policy in [engine_policy(cfg), *geometric_policies(params, cfg), *fitted]:
            result = own
            if policy.token_buckets != token_buckets(cfg):
                # A fresh engine at the policy's buckets, serving the same trace.
                other = ctx.engine(
                    precompile=True,
                    compile_cache=params["compile_cache"],
                    token_buckets=policy.token_buckets,
                )
                result = serve_with(other, requests, timeout_s)
                del other  # its KV pool goes before the next policy's
                ctx.save_frames(
                    requests=result.served.requests,
                    steps=result.served.steps,
                    trial=trial,
                    policy=policy.name,
                )
            ctx.record(
                "policy_padding_pct",
                measured_padding_pct(result.steps),
                trial=trial,
                unit="%",
                policy=policy.name,
                programs=result.programs,
                compiles_while_serving=result.compiles,
                token_buckets=list(policy.token_buckets),
                num_steps=len(result.steps),
                timed_out=result.served.timed_out,
            )


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """Programs against padding per policy (newest run; each policy's mean over trials as a
    line point, every trial as a dot)."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    from claimbench.lab.figures.svg import figure_to_svg

    for run_dir in reversed(run_dirs):
        path = Path(run_dir) / "measurements.parquet"
        if not path.is_file():
            continue
        rows = pd.read_parquet(path)
        rows = rows[rows["metric"] == "policy_padding_pct"]
        if len(rows):
            break
    else:
        return []
    labels = [json.loads(x) for x in rows["labels"]]
    points = rows.assign(
        policy=[x["policy"] for x in labels], programs=[x["programs"] for x in labels]
    )
    with rc_context({"svg.fonttype": "none", "font.size": 9}):
        fig = Figure(figsize=(6.0, 3.6))
        ax = fig.add_subplot()
        for family, colour in (("geometric", "#2166ac"), ("histogram", "#1b7837")):
            mine = points[points["policy"].str.startswith(family)]
            ax.scatter(mine["programs"], mine["value"], s=8, color=colour, alpha=0.35)
            # One point per policy: its programs and padding averaged over trials (a fitted
            # policy's programs can differ from trial to trial).
            mean = mine.groupby("policy")[["programs", "value"]].mean().sort_values("programs")
            ax.plot(mean["programs"], mean["value"], color=colour, marker="o", label=family)
        engine = points[points["policy"].str.startswith("engine")]
        ax.scatter(
            engine["programs"].mean(),
            engine["value"].mean(),
            s=80,
            marker="*",
            color="#b35806",
            label="the engine (powers of two)",
            zorder=3,
        )
        ax.set_xlabel("compiled step programs")
        ax.set_ylabel("padding (% of computed tokens)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(frameon=False)
        svg = figure_to_svg(fig)
    return [("Compiled programs against padding, per bucket policy", svg)]
