"""continuous-batching: output throughput of continuous vs static batching, same engine and pool.

One engine (prefix caching off, so neither mode reuses the other's prompts) serves the same
``num_requests`` requests twice per trial, at the same ``max_num_seqs`` (the batch size); the
arms differ only in when a waiting request may join the batch:

* continuous: every request is queued at once; the scheduler admits a waiting request as soon
  as a running one finishes, mixing its prefill chunks with the others' decode steps;
* static: the requests are cut, in order, into batches of ``max_num_seqs``; a batch is queued,
  stepped until its longest request finishes, and only then is the next one queued.

Output lengths are lognormal (``output_len``), so a static batch pays for its longest output
while its shorter requests' slots sit empty: that is the mechanism under test. Prompts are
lognormal too (``prompt_len``); outputs ignore EOS so both modes produce exactly the same
tokens. Throughput = output tokens / wall seconds from the first request queued to the last
finished; the two modes run in alternating order across trials.

A finite run of the continuous arm ends in a drain: once the queue is empty its batch empties
request by request, as a static batch does. ``num_requests`` is sized so that this tail is a
small share of the run (under 5% at the profiles' sizes), and that share is recorded per trial
(``drain_share_pct``, and in steps ``drain_step_share_pct``) so a reader can check the
comparison measured steady batching.

Counterfactual (``counterfactual``, lab/engines/counterfactuals.py): ``static-both``, the continuous
arm is served in static batches too.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pandas as pd

from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.engines import counterfactuals
from claimbench.lab.engines.engine_settings import EngineSettings
from claimbench.workload.build import WorkloadRequest, build_requests
from claimbench.workload.lengths import length_dist_from_dict
from claimbench.workload.spec import WorkloadSpec
from claimbench.workload.tenants import TenantLoad
from claimbench.workload.tokens import random_token_source

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext
    from claimbench.models.config import ModelConfig

DEFAULT_PARAMS: dict[str, Any] = {
    "num_requests": 384,
    "max_num_seqs": 8,
    "prompt_len": {"kind": "lognormal", "mean": 128, "sigma": 1.0, "lo": 4, "hi": 384},
    "output_len": {"kind": "lognormal", "mean": 64, "sigma": 1.0, "lo": 1, "hi": 128},
    "engine": {},
    "counterfactual": counterfactuals.NONE,
}
MODES = ("continuous", "static")
COUNTERFACTUALS = ("static-both",)


def draw_requests(
    params: dict[str, Any], seed: int, vocab_size: int, max_model_len: int
) -> list[WorkloadRequest]:
    """``num_requests`` requests of the length mix, in a fixed order for both modes."""
    load = TenantLoad(
        "default",
        arrival="constant",  # only the order matters: both modes queue requests themselves
        rate=1.0,
        prompt_len=length_dist_from_dict(params["prompt_len"]),
        output_len=length_dist_from_dict(params["output_len"]),
        num_requests=params["num_requests"],
    )
    requests = build_requests(WorkloadSpec((load,), seed=seed), random_token_source(vocab_size))
    longest = max(r.prompt_len + r.max_tokens for r in requests)
    if longest > max_model_len:
        raise ValueError(
            f"a request of {longest} prompt + output tokens exceeds max_model_len={max_model_len}"
        )
    return requests


def serve(engine: LLMEngine, requests: list[WorkloadRequest], batch: int | None) -> float:
    """Serve the requests (all at once, or static batches of ``batch``); wall seconds."""
    groups = (
        [requests]
        if batch is None
        else [requests[i : i + batch] for i in range(0, len(requests), batch)]
    )
    start = time.perf_counter()
    for group in groups:
        for r in group:
            engine.add_request(
                list(r.prompt_token_ids), SamplingParams(max_tokens=r.max_tokens, ignore_eos=True)
            )
        while engine.has_unfinished:
            engine.step()
    return time.perf_counter() - start


def drain_start_s(requests: pd.DataFrame) -> float:
    """When a run's drain starts: the first finish after the last request was admitted. From
    then on a freed slot has no waiting request to take it, and the batch only empties."""
    finish = requests["finish_s"].to_numpy()
    return float(finish[finish > requests["first_scheduled_s"].max()].min())


def drain_share(requests: pd.DataFrame) -> float:
    """Share (0..1) of a run's span, first arrival to last finish, spent draining."""
    end = requests["finish_s"].max()
    return float((end - drain_start_s(requests)) / (end - requests["arrival_s"].min()))


def drain_step_share(requests: pd.DataFrame, steps: pd.DataFrame) -> float:
    """Share (0..1) of a run's steps that start after its drain started: the drain counted in
    steps, which a busy machine does not stretch."""
    return float((steps["start_s"] > drain_start_s(requests)).mean())


def _check(params: dict[str, Any]) -> None:
    for key in ("num_requests", "max_num_seqs"):
        if not isinstance(params[key], int) or params[key] < 1:
            raise ValueError(f"param {key} must be a positive integer, got {params[key]!r}")
    if params["num_requests"] < 2 * params["max_num_seqs"]:
        raise ValueError(
            f"num_requests={params['num_requests']} must be at least two batches of "
            f"max_num_seqs={params['max_num_seqs']}"
        )


def engines(params: dict[str, Any], model: ModelConfig | None, dtype: str) -> EngineSettings:
    """One engine that runs ``max_num_seqs`` sequences at once, prefix caching off (both
    modes serve on it)."""
    return EngineSettings({"": {"max_num_seqs": params["max_num_seqs"], "prefix_caching": "off"}})


def run(ctx: RunContext) -> None:
    """Record throughput_ratio (continuous / static output tokens per second) per trial,
    with each mode's throughput and the continuous run's drain share beside it."""
    params = ctx.merged(DEFAULT_PARAMS)
    _check(params)
    static_only = counterfactuals.chosen(params, COUNTERFACTUALS) == "static-both"
    engine = ctx.engine(precompile=True, **engines(params, None, ctx.dtype).settings[""])
    for trial in range(ctx.trials):
        requests = draw_requests(
            params,
            ctx.seed + trial,
            engine.model_cfg.vocab_size,
            engine.config.scheduler.max_model_len,
        )
        num_output = sum(r.max_tokens for r in requests)
        throughput = {}
        # Alternate which mode goes first, so slow drift on the machine favours neither.
        for mode in MODES[:: 1 if trial % 2 == 0 else -1]:
            engine.reset()
            continuous = mode == "continuous" and not static_only
            seconds = serve(engine, requests, None if continuous else params["max_num_seqs"])
            throughput[mode] = num_output / seconds
            served = engine.requests_frame()
            if int(served["output_tokens"].sum()) != num_output:
                raise RuntimeError(f"{mode} batching did not produce every output token")
            ctx.save_frames(requests=served, steps=engine.steps_frame(), mode=mode, trial=trial)
            ctx.record("output_throughput", throughput[mode], trial=trial, unit="tok/s", mode=mode)
            ctx.record("num_steps", len(engine.steps_frame()), trial=trial, unit="steps", mode=mode)
            if mode == "continuous":
                share = 100.0 * drain_share(served)
                ctx.record("drain_share_pct", share, trial=trial, unit="%")
                step_share = 100.0 * drain_step_share(served, engine.steps_frame())
                ctx.record("drain_step_share_pct", step_share, trial=trial, unit="%")
        ratio = throughput["continuous"] / throughput["static"]
        ctx.record("throughput_ratio", ratio, trial=trial, unit="x")
