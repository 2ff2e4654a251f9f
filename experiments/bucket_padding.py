"""bucket-padding: the padding and compiled programs of power-of-two step buckets on a trace.

Each trial serves one realistic trace on the real engine and reads its step records: every
step's scheduled tokens, its sequences and the (token, sequence) bucket pair it ran at. The
trace is the workload generator's: gamma arrivals (``burstiness`` < 1: bursty) at ``load`` x
the saturation measured in the trial, for the time the engine needs to serve
``episode_requests`` requests at saturation (service units), then drained. Prompt lengths are
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
* num_programs (analytic): the engine compiles one program per (token bucket, sequence
  bucket) pair ahead of serving (precompile), so the count is arithmetic on its config and is
  recorded once with its inputs. ``programs_used`` (measured) is how many pairs the trace
  touched, and ``compiles_while_serving`` checks that serving compiled none.
* The curve: the same served steps re-padded under other token buckets (the engine's sequence
  buckets kept): geometric buckets at ``ratios`` (2 is the engine's powers of two, so that
  point must equal the measurement) and histogram buckets fitted to the trial's own steps
  (``histogram_buckets`` token buckets each, the largest the step budget). That is arithmetic
  on measured step sizes; it leaves out that other buckets would change step times and so,
  slightly, how the trace's requests share steps.

Why it can come out either way: padding is what the trace leaves after the scheduler fills
steps. Under load, chunked prefill fills steps to the budget (a bucket, so no padding); between
bursts, decode-only steps of a few sequences pad up to the next power of two and to the
sequence bucket's floor. Which dominates is the trace's, at the pre-registered load.

Params (claims.yaml, per profile): engine, compile_cache, load, burstiness, prompt_len ([lo,
hi] clip of the document lengths), output_mean, output_sigma, output_max, episode_requests,
saturation_requests, ratios, histogram_buckets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from claimbench.engine.buckets import bucket_pairs, seq_buckets, token_buckets
from claimbench.engine.config import MIN_TOKEN_BUCKET
from claimbench.harness import tenant_runs as tr
from claimbench.harness.bucket_policies import (
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
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "engine": {},
    "compile_cache": True,
    "load": 0.7,
    "burstiness": 0.5,
    "prompt_len": [16, 512],
    "output_mean": 128.0,
    "output_sigma": 1.0,
    "output_max": 512,
    "episode_requests": 64,
    "saturation_requests": 64,
    "ratios": [4.0, 2.0, 1.5],
    "histogram_buckets": [2, 3, 4, 6, 8],
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


def engine_policy(cfg: EngineConfig) -> BucketPolicy:
    """The engine's own buckets."""
    return BucketPolicy("engine (powers of two)", token_buckets(cfg), seq_buckets(cfg))


def policies(params: dict[str, Any], cfg: EngineConfig, steps: pd.DataFrame) -> list[BucketPolicy]:
    """The curve's policies: geometric token buckets at each ratio, and histogram buckets
    fitted to ``steps`` (the engine's sequence buckets throughout)."""
    budget, seqs = cfg.max_num_batched_tokens, seq_buckets(cfg)
    out = [
        BucketPolicy(f"geometric x{r:g}", geometric_buckets(MIN_TOKEN_BUCKET, budget, r), seqs)
        for r in params["ratios"]
    ]
    needed = engine_policy(cfg).needed_tokens(steps["num_scheduled_tokens"], steps["num_seqs"])
    out += [
        BucketPolicy(f"histogram {k}", fit_histogram_buckets(needed, k, budget), seqs)
        for k in params["histogram_buckets"]
    ]
    return out


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
    """Record num_programs once (analytic) and padding_waste_pct per trial, with the curve's
    policy_padding_pct, programs_used and compiles_while_serving beside."""
    params = ctx.merged(DEFAULT_PARAMS)
    engine = ctx.engine(precompile=True, compile_cache=params["compile_cache"])
    cfg, vocab = engine.config, engine.model_cfg.vocab_size
    pairs = bucket_pairs(cfg)
    ctx.record_analytic(
        "num_programs",
        len(pairs),
        unit="programs",
        inputs={
            "token_buckets": list(token_buckets(cfg)),
            "seq_buckets": list(seq_buckets(cfg)),
            "rule": "one program per (token, seq) bucket pair with seq <= token",
        },
    )
    doc_lengths = document_lengths(ctx.model_path)
    for trial in range(ctx.trials):
        spec = trace_spec(params, doc_lengths, tr.trial_seed(ctx, trial))
        saturation = tr.measure_saturation(engine, spec, params["saturation_requests"])
        phase = tr.Phase(params["episode_requests"], params["load"])
        requests = tr.phased_requests(spec, saturation, [phase], vocab)
        engine.reset()
        compiled_before = engine.stats().num_compilations
        timeout_s = tr.safety_timeout_s(saturation.seconds_for(params["episode_requests"]))
        served = tr.serve(engine, requests, timeout_s)
        compiles = engine.stats().num_compilations - compiled_before
        ctx.save_frames(requests=served.requests, steps=served.steps, trial=trial)
        steps = arrival_window(served)
        labels = {
            "load": params["load"],
            "saturation_tok_s": saturation.output_tokens_per_s,
            "num_requests": len(requests),
            "num_steps": len(steps),  # in the arrival window
            "timed_out": served.timed_out,
        }
        ctx.record(
            "padding_waste_pct", measured_padding_pct(steps), trial=trial, unit="%", **labels
        )
        used = steps[["token_bucket", "seq_bucket"]].drop_duplicates()
        ctx.record("programs_used", len(used), trial=trial, unit="programs", **labels)
        ctx.record("compiles_while_serving", compiles, trial=trial, unit="programs")
        n, s = steps["num_scheduled_tokens"].to_numpy(), steps["num_seqs"].to_numpy()
        for policy in [engine_policy(cfg), *policies(params, cfg, steps)]:
            ctx.record(
                "policy_padding_pct",
                policy.padding_pct(n, s),
                trial=trial,
                unit="%",
                policy=policy.name,
                programs=policy.num_programs,
                token_buckets=list(policy.token_buckets),
            )


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """Programs against padding per policy (newest run; each policy's mean over trials as a
    line point, every trial as a dot)."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    from claimbench.site.charts import figure_to_svg

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
            label="the engine (powers of two), measured",
            zorder=3,
        )
        ax.set_xlabel("compiled step programs")
        ax.set_ylabel("padding (% of computed tokens)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(frameon=False)
        svg = figure_to_svg(fig)
    return [("Compiled programs against padding, per bucket policy", svg)]
