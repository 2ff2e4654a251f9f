"""headroom-binds: does output throughput stop rising where KV headroom runs out?

A closed-loop sweep: at each offered concurrency N the engine keeps N requests in flight,
submitting a new request whenever one finishes, until N * (1 + ``requests_per_slot``) requests
have been submitted. A closed loop sets load by requests in flight, never by wall time, so a
faster engine runs the same experiment. The levels are ``kv_fit_levels``: multiples of the
pool's KV-fit concurrency, the usable pages over the pages a request of mean length holds at
its end (from the length distributions), so the sweep brackets the pool's limit whatever its
size. Throughput is measured in the steady
window from the first completion to the last submission (N requests in flight throughout):
output tokens emitted in that window / its length. The request stream (lognormal prompt and
output lengths, outputs ignoring EOS) is the same at every level of a trial; each level starts
from a reset engine with prefix caching off, ``max_num_seqs`` = the largest N, so the sequence
limit never binds and only compute, the token budget or the KV pool can.

* Throughput knee: the smallest N whose throughput reaches ``knee_fraction`` (0.95) of the
  largest throughput of the sweep.
* KV exhaustion: the smallest N at which the KV headroom reaches zero: a running request is
  preempted, or before some step the first waiting request's next chunk (its uncomputed tokens,
  capped at the token budget left after one token per running request) does not fit in the
  free pages, so admission stalls on KV.

Both are measured in every trial, on that trial's own sweep. The recorded ratio is knee /
exhaustion; each level's throughput and minimum KV headroom (free pages / usable pages) are
recorded too, labelled with the concurrency.

Counterfactuals (``counterfactual``, lab/engines/counterfactuals.py): ``kv-elastic``, the engine
serves with a pool ``ELASTIC_POOL`` times the registered one, so KV never binds within the
sweep, while exhaustion is still read against the registered pool: the first level at which
the pages in use exceed its usable pages (where it would have stalled or preempted); and
``compute-bound``, every step takes ``COMPUTE_BOUND_S_PER_TOKEN`` longer per token it
scheduled (the closed loop waits that long after it), so a step's time grows with its batch as
a compute-bound device's does, batching buys nothing, and throughput stops rising long
before the pool runs out (admission, and so exhaustion, is unchanged). Its wait dwarfs a CPU
step of the tests' tiny sizes; at the profiles' sizes it would take hours.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from claimbench.engine.outputs import FinishEvent, TokenEvent
from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.engines import counterfactuals
from claimbench.workload.build import WorkloadRequest, build_requests
from claimbench.workload.lengths import length_dist_from_dict
from claimbench.workload.spec import WorkloadSpec
from claimbench.workload.tenants import TenantLoad
from claimbench.workload.tokens import random_token_source

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "kv_fit_levels": [0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0],
    "requests_per_slot": 2,
    "knee_fraction": 0.95,
    "prompt_len": {"kind": "lognormal", "mean": 96, "sigma": 0.8, "lo": 4, "hi": 256},
    "output_len": {"kind": "lognormal", "mean": 48, "sigma": 0.8, "lo": 4, "hi": 128},
    "engine": {},
    # Seconds the closed loop waits after every step (0: none). A test's stand-in for a device
    # whose step time does not depend on its batch, so its throughput is not a busy host's noise.
    "step_wait_s": 0.0,
    "counterfactual": counterfactuals.NONE,
}
LENGTHS = ("prompt_len", "output_len")
COUNTERFACTUALS = ("kv-elastic", "compute-bound")
ELASTIC_POOL = 4  # kv-elastic's pool over the registered one: beyond the sweep's 2x levels
COMPUTE_BOUND_S_PER_TOKEN = 0.05  # compute-bound's added step time per scheduled token


@dataclass(frozen=True)
class Level:
    concurrency: int
    output_throughput: float  # tokens/s in the steady window
    min_kv_headroom_pct: float  # lowest free / usable pages over the level's steps
    num_preemptions: int
    num_kv_stalls: int  # steps before which the head of the queue did not fit in free pages

    @property
    def kv_exhausted(self) -> bool:
        return self.num_preemptions > 0 or self.num_kv_stalls > 0


def kv_fit_concurrency(params: dict[str, Any], num_usable_pages: int, page_size: int) -> float:
    """Requests of mean prompt + output length whose KV fills the pool at their last token."""
    mean_tokens = sum(length_dist_from_dict(params[k]).expected_len() for k in LENGTHS)
    return num_usable_pages / (mean_tokens / page_size)


def concurrencies(levels: list[float], kv_fit: float) -> list[int]:
    """The sweep in requests in flight: each level times ``kv_fit``, rounded, at least 1,
    duplicates dropped."""
    return sorted({max(1, round(level * kv_fit)) for level in levels})


def draw_requests(
    params: dict[str, Any], num: int, seed: int, vocab_size: int, max_model_len: int
) -> list[WorkloadRequest]:
    """``num`` requests of the length mix, in the order every level submits them."""
    load = TenantLoad(
        "default",
        arrival="constant",  # only the order matters: the closed loop submits them itself
        rate=1.0,
        prompt_len=length_dist_from_dict(params["prompt_len"]),
        output_len=length_dist_from_dict(params["output_len"]),
        num_requests=num,
    )
    requests = build_requests(WorkloadSpec((load,), seed=seed), random_token_source(vocab_size))
    longest = max(r.prompt_len + r.max_tokens for r in requests)
    if longest > max_model_len:
        raise ValueError(
            f"a request of {longest} prompt + output tokens exceeds max_model_len={max_model_len}"
        )
    return requests


def kv_stalled(engine: LLMEngine) -> bool:
    """Whether the next step's first waiting request cannot get its next chunk's pages."""
    return engine.stats().head_blocked_on_kv


def closed_loop(
    engine: LLMEngine,
    requests: list[WorkloadRequest],
    concurrency: int,
    registered_pages: int | None = None,
    s_per_token: float = 0.0,
    step_wait_s: float = 0.0,
) -> Level:
    """Keep ``concurrency`` of ``requests`` in flight until all are submitted, then drain.

    ``registered_pages`` (kv-elastic): the engine's pool is larger than the registered one,
    whose exhaustion is then counted as the steps that held more than its usable pages.
    ``s_per_token`` (compute-bound): seconds waited after each step per token it scheduled;
    ``step_wait_s``: seconds waited after every step besides."""
    engine.reset()
    token_times: list[float] = []
    in_flight = submitted = stalls = 0
    window_start = window_end = None
    while submitted < len(requests) or engine.has_unfinished:
        while in_flight < concurrency and submitted < len(requests):
            r = requests[submitted]
            sampling = SamplingParams(max_tokens=r.max_tokens, ignore_eos=True)
            engine.add_request(list(r.prompt_token_ids), sampling)
            in_flight += 1
            submitted += 1
            if submitted == len(requests):
                window_end = time.perf_counter()
        stalls += kv_stalled(engine)
        events = engine.step()
        if (s_per_token or step_wait_s) and engine.step_records:
            num_tokens = engine.step_records[-1].num_scheduled_tokens
            time.sleep(step_wait_s + s_per_token * num_tokens)
        for event in events:
            if isinstance(event, TokenEvent):
                token_times.append(event.time_s)
            elif isinstance(event, FinishEvent):
                in_flight -= 1
                window_start = event.time_s if window_start is None else window_start
    if window_start is None or window_end is None or window_end <= window_start:
        raise RuntimeError(f"concurrency {concurrency}: no steady window (too few requests)")
    times = np.asarray(token_times)
    num_tokens = int(((times >= window_start) & (times < window_end)).sum())
    steps = engine.steps_frame()
    headroom = steps["pages_free"] / (steps["pages_used"] + steps["pages_free"])
    if registered_pages is not None:
        stalls = int((steps["pages_used"] > registered_pages).sum())
        headroom = 1.0 - steps["pages_used"] / registered_pages
    return Level(
        concurrency=concurrency,
        output_throughput=num_tokens / (window_end - window_start),
        min_kv_headroom_pct=100.0 * float(headroom.min()),
        num_preemptions=int(steps["num_preempted"].sum()),
        num_kv_stalls=stalls,
    )


def knee_and_exhaustion(levels: list[Level], knee_fraction: float) -> tuple[int, int | None]:
    """(smallest N reaching knee_fraction of the best throughput, smallest N exhausting KV)."""
    best = max(level.output_throughput for level in levels)
    knee = min(lv.concurrency for lv in levels if lv.output_throughput >= knee_fraction * best)
    exhausted = [lv.concurrency for lv in levels if lv.kv_exhausted]
    return knee, min(exhausted) if exhausted else None


def _check(params: dict[str, Any]) -> None:
    wait = params["step_wait_s"]
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait < 1:
        raise ValueError(f"param step_wait_s must be a number of seconds in [0, 1), got {wait!r}")
    levels = params["kv_fit_levels"]
    if (
        not isinstance(levels, list)
        or len(levels) < 2
        or not all(isinstance(x, int | float) and x > 0 for x in levels)
        or levels != sorted(set(levels))
    ):
        raise ValueError(f"param kv_fit_levels must be >= 2 increasing numbers > 0, got {levels!r}")
    if not isinstance(params["requests_per_slot"], int) or params["requests_per_slot"] < 1:
        raise ValueError(
            f"param requests_per_slot must be >= 1, got {params['requests_per_slot']!r}"
        )
    if not 0 < params["knee_fraction"] <= 1:
        raise ValueError(f"param knee_fraction must be in (0, 1], got {params['knee_fraction']!r}")


def sweep_levels(
    ctx: RunContext, params: dict[str, Any]
) -> tuple[LLMEngine, list[int], int | None]:
    """The engine, sized so the sequence limit never binds, the sweep's concurrencies and,
    under kv-elastic, the registered pool's usable pages (the engine's pool is larger)."""
    # The pool's size does not depend on max_num_seqs: a probe engine's pool sizes the sweep.
    probe = ctx.engine(prefix_caching="off")
    kv_fit = kv_fit_concurrency(
        params, probe.stats().num_usable_pages, probe.config.cache.page_size
    )
    levels_n = concurrencies(params["kv_fit_levels"], kv_fit)
    budget = max(levels_n[-1], probe.config.scheduler.max_num_batched_tokens)
    overrides: dict[str, Any] = {}
    registered_pages = None
    if counterfactuals.chosen(params, COUNTERFACTUALS) == "kv-elastic":
        overrides["kv_pool_bytes"] = ELASTIC_POOL * probe.config.cache.kv_pool_bytes
        registered_pages = probe.stats().num_usable_pages
    engine = ctx.engine(
        precompile=True,
        max_num_seqs=levels_n[-1],
        max_num_batched_tokens=budget,
        prefix_caching="off",
        **overrides,
    )
    return engine, levels_n, registered_pages


def run(ctx: RunContext) -> None:
    """Record knee_over_kv_exhaustion per trial (plus each level's throughput and headroom)."""
    params = ctx.merged(DEFAULT_PARAMS)
    _check(params)
    engine, levels_n, registered_pages = sweep_levels(ctx, params)
    compute_bound = counterfactuals.chosen(params, COUNTERFACTUALS) == "compute-bound"
    s_per_token = COMPUTE_BOUND_S_PER_TOKEN if compute_bound else 0.0
    num_requests = levels_n[-1] * (1 + params["requests_per_slot"])
    for trial in range(ctx.trials):
        stream = draw_requests(
            params,
            num_requests,
            ctx.seed + trial,
            engine.model_cfg.vocab_size,
            engine.config.scheduler.max_model_len,
        )
        levels = []
        for n in levels_n:
            level = closed_loop(
                engine,
                stream[: n * (1 + params["requests_per_slot"])],
                n,
                registered_pages,
                s_per_token,
                params["step_wait_s"],
            )
            levels.append(level)
            ctx.save_frames(steps=engine.steps_frame(), concurrency=n, trial=trial)
            labels = {"trial": trial, "concurrency": n}
            ctx.record("output_throughput", level.output_throughput, unit="tok/s", **labels)
            ctx.record("min_kv_headroom_pct", level.min_kv_headroom_pct, unit="%", **labels)
            ctx.record("num_preemptions", level.num_preemptions, unit="requests", **labels)
            ctx.record("num_kv_stalls", level.num_kv_stalls, unit="steps", **labels)
        knee, exhaustion = knee_and_exhaustion(levels, params["knee_fraction"])
        if exhaustion is None:
            raise RuntimeError(
                f"KV headroom never reached zero up to concurrency {levels_n[-1]}: extend "
                "kv_fit_levels"
            )
        ctx.record("knee_concurrency", knee, trial=trial, unit="requests")
        ctx.record("kv_exhaustion_concurrency", exhaustion, trial=trial, unit="requests")
        ctx.record("knee_over_kv_exhaustion", knee / exhaustion, trial=trial, unit="x")


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """Throughput and minimum KV headroom against offered concurrency on one chart: trial
    values as dots, their mean as a line, the mean knee and exhaustion points as verticals."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    from claimbench.lab.figures.svg import figure_to_svg

    frames = [
        pd.read_parquet(d / "measurements.parquet")
        for d in run_dirs
        if (d / "measurements.parquet").is_file()
    ]
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if rows.empty or "output_throughput" not in set(rows["metric"]):
        return []
    levels = rows[rows["metric"].isin(["output_throughput", "min_kv_headroom_pct"])]
    levels = levels.assign(concurrency=[json.loads(x)["concurrency"] for x in levels["labels"]])
    with rc_context({"svg.fonttype": "none", "font.size": 9}):
        fig = Figure(figsize=(6.0, 3.4))
        ax = fig.add_subplot()
        right = ax.twinx()
        for axis, metric, colour, label in (
            (ax, "output_throughput", "#2166ac", "output throughput (tok/s)"),
            (right, "min_kv_headroom_pct", "#b35806", "min KV headroom (% of pool)"),
        ):
            points = levels[levels["metric"] == metric]
            axis.scatter(points["concurrency"], points["value"], s=10, color=colour, alpha=0.4)
            mean = points.groupby("concurrency")["value"].mean()
            axis.plot(mean.index, mean.to_numpy(), color=colour, marker="o", label=label)
            axis.set_ylabel(label, color=colour)
        for metric, style, label in (
            ("knee_concurrency", "--", "throughput knee"),
            ("kv_exhaustion_concurrency", ":", "KV exhausted"),
        ):
            values = rows.loc[rows["metric"] == metric, "value"]
            if len(values):
                ax.axvline(values.mean(), color="#444444", linestyle=style, label=label)
        right.set_ylim(bottom=0)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("offered concurrency (requests in flight)")
        handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
        ax.legend(
            handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False
        )
        ax.grid(alpha=0.3)
        svg = figure_to_svg(fig)
    return [("Throughput and KV headroom against offered concurrency", svg)]
