"""Shared steps of the precision-lever experiments (kv-int8, kv-fp8, fp8-weights, ...).

Each setting (a weight format, a KV format, a dtype) is one engine from ``ctx.engine``, built
once and reused by every trial, so trials differ only in their data: trial t reads its own
seeded sample of held-out windows. Quality comes from the engine's own prompt pass
(lab/quality/quality.py) on the served model and is measured per trial. Capacity is arithmetic
on the layout of the model a claim names (lab/metrics/capacity.py), recorded once as analytic
evidence with the inputs of its formula.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from claimbench.engine.config import DEFAULT_PAGE_SIZE
from claimbench.hardware.model_presets import get_preset, model_config
from claimbench.lab.metrics.capacity import PoolCapacity, layout_inputs, pool_capacity
from claimbench.lab.quality.quality import PromptPass, heldout_windows, prompt_pass

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext

T = TypeVar("T")
QUALITY_DEFAULTS: dict[str, Any] = {
    "num_windows": 8,  # held-out windows per trial
    "window_len": 256,  # tokens per window (window_len - 1 predictions each)
    "engine": {},  # EngineConfig options of every setting's engine
}
# The claims' capacity is about a Llama-3.1-8B-class model on an accelerator: its KV pool is
# what a 32 GB v6e leaves beside 16 GB of bf16 weights.
CAPACITY_DEFAULTS: dict[str, Any] = {
    "model": "llama-3.1-8b",  # the model the claim names (hardware/model_presets.py)
    "pool_bytes": 16 * 2**30,  # that model's KV pool
    "page_size": DEFAULT_PAGE_SIZE,  # tokens per page
    "seq_len": 1024,  # tokens per sequence
}


def trial_seed(ctx: RunContext, trial: int) -> int:
    """A seed per (run seed, trial): trials of one run, and runs, sample different data."""
    return int(np.random.SeedSequence([ctx.seed, trial]).generate_state(1)[0])


def trial_windows(ctx: RunContext, params: dict[str, Any], trial: int) -> np.ndarray:
    """i32[num_windows, window_len]: trial ``trial``'s held-out windows for the served model."""
    return heldout_windows(
        ctx.model_path, params["num_windows"], params["window_len"], trial_seed(ctx, trial)
    )


def arm_order(names: list[str], trial: int) -> list[str]:
    """The settings rotated by ``trial``: each goes first in turn, so a drift in machine speed
    over a run does not always land on the same setting's timing."""
    shift = trial % len(names)
    return names[shift:] + names[:shift]


def quality_options(params: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """ctx.engine options for an engine that serves whole windows as prompts: long enough,
    prefix caching off, then ``overrides``."""
    options = {"prefix_caching": "off", "max_model_len": params["window_len"] + 1}
    return options | overrides


def record_pass(ctx: RunContext, result: PromptPass, *, trial: int, setting: str) -> None:
    """The supporting numbers of one setting's prompt pass."""
    ctx.record("perplexity", result.perplexity, trial=trial, setting=setting)
    ctx.record(
        "prompt_tokens_per_s", result.tokens_per_s, trial=trial, unit="tok/s", setting=setting
    )


def run_passes(
    ctx: RunContext, engines: dict[str, LLMEngine], windows: np.ndarray, *, trial: int
) -> dict[str, PromptPass]:
    """Every setting's prompt pass over the trial's windows, in ``arm_order``; each pass's
    supporting numbers recorded."""
    passes = {}
    for setting in arm_order(list(engines), trial):
        passes[setting] = prompt_pass(engines[setting], windows)
        record_pass(ctx, passes[setting], trial=trial, setting=setting)
    return passes


def warm_up(engines: dict[str, LLMEngine], windows: np.ndarray) -> None:
    """One unrecorded pass per engine, so every trial's timing is of compiled steps."""
    for engine in engines.values():
        prompt_pass(engine, windows)


def save_engine_frames(ctx: RunContext, engines: dict[str, LLMEngine]) -> None:
    """Keep each setting's per-request and per-step records, labelled with the setting."""
    for setting, engine in engines.items():
        ctx.save_frames(
            requests=engine.requests_frame(), steps=engine.steps_frame(), setting=setting
        )


def each_engine(
    ctx: RunContext,
    options: dict[str, dict[str, Any]],
    measure: Callable[[str, LLMEngine], T],
    *,
    save_frames: bool = True,
) -> dict[str, T]:
    """One setting's engine at a time: build it from ``ctx.engine(**options[setting])``, run
    ``measure(setting, engine)`` (which must not keep the engine), keep its frames (unless
    ``save_frames`` is False: ``measure`` saves its own, e.g. per trial), and free
    it before the next is built, so the chip never holds two settings' weights and pools (a
    7B model's bf16 weights are half a v6e's HBM). The settings take turns going first across
    run seeds (``arm_order``), so a drift in machine speed over a run does not always land on
    the same setting's timings. Returns each setting's measure."""
    results = {}
    for setting in arm_order(list(options), ctx.seed):
        engine = ctx.engine(**options[setting])
        results[setting] = measure(setting, engine)
        if save_frames:
            save_engine_frames(ctx, {setting: engine})
        del engine
        gc.collect()  # the engine's device buffers go now, not at some later collection
    return results


def passes_per_engine(
    ctx: RunContext,
    options: dict[str, dict[str, Any]],
    windows: list[np.ndarray],
    on_build: Callable[[str, LLMEngine], None] | None = None,
) -> dict[str, list[PromptPass]]:
    """Each setting's prompt pass over every trial's windows, one engine at a time
    (``each_engine``): an unrecorded warm-up pass, then one recorded pass per trial; each
    engine's served KV bytes per token recorded once, and ``on_build(setting, engine)`` (what
    an experiment reads from an engine once, e.g. its calibrated scales) run first."""

    def measure(setting: str, engine: LLMEngine) -> list[PromptPass]:
        if on_build is not None:
            on_build(setting, engine)
        record_served_kv_bytes(ctx, {setting: engine})
        warm_up({setting: engine}, windows[0])
        passes = []
        for trial, window_set in enumerate(windows):
            passes.append(prompt_pass(engine, window_set))
            record_pass(ctx, passes[-1], trial=trial, setting=setting)
        return passes

    return each_engine(ctx, options, measure)


def claim_pool(params: dict[str, Any], kv_dtype: str) -> PoolCapacity:
    """The capacity of the claim model's pool (``params``: CAPACITY_DEFAULTS) in ``kv_dtype``."""
    return pool_capacity(
        model_config(get_preset(params["model"])),
        kv_dtype,
        page_size=params["page_size"],
        pool_bytes=params["pool_bytes"],
        seq_len=params["seq_len"],
    )


def record_capacity_ratio(ctx: RunContext, params: dict[str, Any], kv_dtype: str) -> None:
    """capacity_ratio = sequences a ``kv_dtype`` pool holds / a bf16 pool's, in the same bytes,
    for the claim's model: recorded once, analytic, with every term of both counts. The
    bytes-per-token ratio (the limit of a pool much larger than a sequence) goes beside it."""
    shape = get_preset(params["model"])
    base, cand = claim_pool(params, "bf16"), claim_pool(params, kv_dtype)
    inputs = {"layout": layout_inputs(shape), "bf16": base.inputs(), kv_dtype: cand.inputs()}
    ratio = cand.num_seqs / base.num_seqs
    ctx.record_analytic("capacity_ratio", ratio, unit="x", inputs=inputs, model=shape.name)
    ctx.record_analytic(
        "kv_bytes_per_token_ratio",
        base.bytes_per_token / cand.bytes_per_token,
        unit="x",
        inputs=inputs,
        model=shape.name,
    )


def record_served_kv_bytes(ctx: RunContext, engines: dict[str, LLMEngine]) -> None:
    """Side metric, once: each served engine's real KV bytes per token (its arrays' layout)."""
    model = ctx.model_path.name
    for setting, engine in engines.items():
        per_token = engine.stats().kv_bytes_per_token
        ctx.record(
            "served_kv_bytes_per_token",
            per_token,
            trial=0,
            unit="bytes",
            setting=setting,
            model=model,
        )
