"""host-starvation: the host's share of a batch-64 decode step, and what overlapping it recovers.

Workload: ``batch`` requests of ``prompt_len`` random prompt tokens and ``output_len`` output
tokens each (EOS ignored), all submitted at once. A closed batch keeps the engine at its own
full service rate whatever the hardware (the load is 100% of the measured service rate by
construction), and every length is in tokens and steps, never in seconds. The KV pool holds
every request at full length, so the decode steps run the whole batch without preemption.
Each arriving token is detokenized incrementally (the tokenizer's stream decoder, as the
server streams text): detokenisation is host work the claim names.

Per trial the same requests are served twice, async scheduling off and on (engine
``async_scheduling``; the order alternates across trials so drift favours neither). Only
the full-batch decode steps count (every sequence decoding; the prefill steps and the drain
are left out), each with its period: the wall time from its start to the next step's start.

* off (synchronous): the host schedules, builds, dispatches, then waits for the device, then
  reads the tokens, checks stops and detokenizes. ``host_share_pct`` = 100 x (1 - seconds
  the host waited on the device / period seconds): the share of the decode step during which
  the device had nothing to run because the host was working.
* both arms: decode throughput = batch x steps / their period seconds (``decode_tok_s``,
  label ``mode``); ``overlap_gain_pct`` = 100 x (on / off - 1).

Also recorded: the on-arm's share of the period the host spent waiting for the device
(``blocked_share_pct``: high means the host's work is hidden), the off-arm's detokenisation
share, each arm's decode step count, and whether the arms emitted the same tokens.

Param ``device_step_s`` (0: the real device): each step takes that long on the device
(lab/engines/slow_device.py: the host's wait for the step's outputs grows as a slower device would
make it; the host's work is unchanged), a stand-in for a device step heavier than a CPU's.

Counterfactuals (``counterfactual``, lab/engines/counterfactuals.py): ``overlap-off``, the on arm
runs synchronously too, so the arms differ in nothing and the gain is ~0 (measured with a
``device_step_s`` that dwarfs the host's work, a busy host's jitter is a small part of
each period); ``device-heavy``, both arms on a device whose step takes ``DEVICE_HEAVY_S``, far
more than the host's work per step at the sizes a CPU serves, so the host's share of the
synchronous step falls to a few percent.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from claimbench.engine.config import DEFAULT_PAGE_SIZE
from claimbench.engine.outputs import TokenEvent
from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.engines import counterfactuals
from claimbench.lab.engines.slow_device import slow_device
from claimbench.lab.load.tenant_runs import kv_pool_bytes, reset_with, rotated

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "batch": 64,
    "prompt_len": 128,
    "output_len": 128,
    "engine": {},
    "device_step_s": 0.0,
    "counterfactual": counterfactuals.NONE,
}
MODES = ("off", "on")
# Each counterfactual -> each arm's async_scheduling.
COUNTERFACTUALS = {
    "overlap-off": {"off": False, "on": False},
    "device-heavy": {"off": False, "on": True},
}
DEVICE_HEAVY_S = 0.25  # device-heavy's step time: tens of times a tiny CPU step's host work


@dataclass(frozen=True)
class ArmResult:
    """One arm's full-batch decode steps (those followed by another step) and its outputs."""

    periods_s: np.ndarray  # f64[S] start of the next step - start of this one
    blocked_s: np.ndarray  # f64[S] the host waiting on the device within the step
    detok_s: float  # the whole run's detokenisation
    wall_s: float  # the whole run, first request queued to last event
    token_ids: list[list[int]]  # per request, in submission order

    def tokens_per_s(self, batch: int) -> float:
        return batch * len(self.periods_s) / float(self.periods_s.sum())

    def host_share_pct(self) -> float:
        return 100.0 * (1.0 - float(self.blocked_s.sum()) / float(self.periods_s.sum()))

    def blocked_share_pct(self) -> float:
        return 100.0 * float(self.blocked_s.sum()) / float(self.periods_s.sum())


def serve_arm(engine: LLMEngine, prompts: list[list[int]], output_len: int) -> ArmResult:
    """Serve the prompts together on the (reset) engine, detokenizing tokens as they come."""
    sampling = SamplingParams(max_tokens=output_len, ignore_eos=True)
    start = time.perf_counter()
    ids = [engine.add_request(p, sampling) for p in prompts]
    tokenizer = engine.tokenizer
    decoders = {r: tokenizer.stream_decoder() for r in ids} if tokenizer is not None else {}
    detok_s = 0.0
    while engine.has_unfinished:
        events = engine.step()
        t = time.perf_counter()
        for event in events:
            if decoders and isinstance(event, TokenEvent):
                decoders[event.request_id].push(event.token_id)
        detok_s += time.perf_counter() - t
    wall_s = time.perf_counter() - start
    steps = engine.steps_frame()
    batch = len(prompts)
    full = (steps["num_seqs"] == batch) & (steps["num_decode_seqs"] == batch)
    starts = steps["start_s"].to_numpy()
    index = np.flatnonzero(full.to_numpy())  # row positions: each row's successor is the next
    # Every full-batch decode step but the run's last has a successor to end its period.
    index = index[index + 1 < len(steps)]
    return ArmResult(
        periods_s=starts[index + 1] - starts[index],
        blocked_s=steps["host_blocked_s"].to_numpy()[index],
        detok_s=detok_s,
        wall_s=wall_s,
        token_ids=[engine.output(r).token_ids for r in ids],
    )


def _check(params: dict[str, Any]) -> None:
    for key in ("batch", "prompt_len", "output_len"):
        value = params[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"param {key} must be a positive integer, got {value!r}")
    wait = params["device_step_s"]
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait < 10:
        raise ValueError(f"param device_step_s must be seconds in [0, 10), got {wait!r}")
    if params["output_len"] < 3:
        # The first token comes from the prefill; a decode period needs two decode steps.
        raise ValueError(f"param output_len must be >= 3, got {params['output_len']}")


def run(ctx: RunContext) -> None:
    """Record host_share_pct (off arm) and overlap_gain_pct per trial, with each arm's
    decode throughput beside them."""
    params = ctx.merged(DEFAULT_PARAMS)
    _check(params)
    counterfactual = counterfactuals.chosen(params, tuple(COUNTERFACTUALS))
    overlapped = COUNTERFACTUALS.get(counterfactual, {"off": False, "on": True})
    device_step_s = DEVICE_HEAVY_S if counterfactual == "device-heavy" else params["device_step_s"]
    batch, prompt_len, output_len = params["batch"], params["prompt_len"], params["output_len"]
    engine_params = params["engine"]
    overrides: dict[str, Any] = {
        "max_num_seqs": batch,
        "prefix_caching": "off",  # the arms serve the same prompts: no reuse between them
    }
    if "kv_pool_bytes" not in engine_params:
        page_size = engine_params.get("page_size", DEFAULT_PAGE_SIZE)
        pages = batch * -(-(prompt_len + output_len) // page_size)
        overrides["kv_pool_bytes"] = kv_pool_bytes(ctx, engine_params, pages)
    engine = ctx.engine(precompile=True, **overrides)
    if prompt_len + output_len > engine.config.scheduler.max_model_len:
        raise ValueError(
            f"prompt_len + output_len = {prompt_len + output_len} exceeds "
            f"max_model_len={engine.config.scheduler.max_model_len}"
        )
    vocab = engine.model_cfg.vocab_size
    # Warm both arms' host paths and the device-side token merge's shapes, untimed.
    warm = np.random.default_rng([ctx.seed, 1]).integers(3, vocab, size=(batch, prompt_len))
    for mode in MODES:
        reset_with(engine, async_scheduling=mode == "on")
        serve_arm(engine, warm.tolist(), 3)
    for trial in range(ctx.trials):
        rng = np.random.default_rng(ctx.seed + trial)
        prompts = rng.integers(3, vocab, size=(batch, prompt_len)).tolist()
        arms: dict[str, ArmResult] = {}
        for mode in rotated(MODES, trial):
            reset_with(engine, async_scheduling=overlapped[mode])
            with slow_device(engine, device_step_s) if device_step_s else nullcontext():
                arm = serve_arm(engine, prompts, output_len)
            if len(arm.periods_s) == 0:
                raise RuntimeError(f"async {mode}: no full-batch decode step ran")
            arms[mode] = arm
            ctx.save_frames(steps=engine.steps_frame(), mode=mode, trial=trial)
            tok_s = arm.tokens_per_s(batch)
            ctx.record("decode_tok_s", tok_s, trial=trial, unit="tok/s", mode=mode)
            steps = len(arm.periods_s)
            ctx.record("decode_steps", steps, trial=trial, unit="steps", mode=mode)
        off, on = arms["off"], arms["on"]
        ctx.record("host_share_pct", off.host_share_pct(), trial=trial, unit="%")
        gain = 100.0 * (on.tokens_per_s(batch) / off.tokens_per_s(batch) - 1.0)
        ctx.record("overlap_gain_pct", gain, trial=trial, unit="%")
        ctx.record("blocked_share_pct", on.blocked_share_pct(), trial=trial, unit="%", mode="on")
        detok = 100.0 * off.detok_s / off.wall_s
        ctx.record("detok_share_pct", detok, trial=trial, unit="%", mode="off")
        same = float(off.token_ids == on.token_ids)
        ctx.record("arms_outputs_match", same, trial=trial, unit="bool")
