"""Shared steps of the precision-lever experiments (kv-int8, kv-fp8, fp8-weights, ...).

Each setting (a weight format, a KV format, a dtype) is one engine, built once and reused
by every trial, so trials differ only in their data: trial t reads its own seeded sample of
held-out windows. Quality comes from the engine's own prompt pass (harness/quality.py),
capacity from filling the engine's own pool (harness/capacity.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from claimbench.harness.capacity import fill_capacity
from claimbench.harness.quality import PromptPass, heldout_windows, prompt_pass

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext

QUALITY_DEFAULTS: dict[str, Any] = {
    "num_windows": 8,  # held-out windows per trial
    "window_len": 256,  # tokens per window (window_len - 1 predictions each)
}


def experiment_params(ctx: RunContext, defaults: dict[str, Any]) -> dict[str, Any]:
    """``defaults`` overridden by the profile's params; unknown keys (other than the engine's
    options and the trial count) raise ValueError naming them."""
    extra = sorted(set(ctx.params) - set(defaults) - {"engine", "trials"})
    if extra:
        raise ValueError(f"{ctx.claim_id}: unknown params {extra}; known: {sorted(defaults)}")
    return defaults | {key: ctx.params[key] for key in defaults if key in ctx.params}


def trial_seed(ctx: RunContext, trial: int) -> int:
    """A seed per (run seed, trial): trials of one run, and runs, sample different data."""
    return int(np.random.SeedSequence([ctx.seed, trial]).generate_state(1)[0])


def trial_windows(ctx: RunContext, params: dict[str, Any], trial: int) -> np.ndarray:
    """i32[num_windows, window_len]: trial ``trial``'s held-out windows for the served model."""
    return heldout_windows(
        ctx.model_path, params["num_windows"], params["window_len"], trial_seed(ctx, trial)
    )


def quality_engine(ctx: RunContext, params: dict[str, Any], **overrides: Any) -> LLMEngine:
    """An engine that serves whole windows as prompts: long enough, prefix caching off."""
    options = {"prefix_caching": "off", "max_model_len": params["window_len"] + 1}
    return ctx.engine(**(options | overrides))


def record_pass(ctx: RunContext, result: PromptPass, *, trial: int, setting: str) -> None:
    """The supporting numbers of one setting's prompt pass."""
    ctx.record("perplexity", result.perplexity, trial=trial, setting=setting)
    ctx.record(
        "prompt_tokens_per_s", result.tokens_per_s, trial=trial, unit="tok/s", setting=setting
    )


def run_pass(
    ctx: RunContext, engine: LLMEngine, windows: np.ndarray, *, trial: int, setting: str
) -> PromptPass:
    """One setting's prompt pass over the trial's windows, its supporting numbers recorded."""
    result = prompt_pass(engine, windows)
    record_pass(ctx, result, trial=trial, setting=setting)
    return result


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


def capacity_engines(
    ctx: RunContext, params: dict[str, Any], settings: dict[str, dict[str, Any]]
) -> tuple[dict[str, LLMEngine], dict[str, int]]:
    """One engine per setting over the same ``pool_bytes`` KV budget, and the number of
    ``seq_len``-token sequences each one's pool holds (measured by filling it)."""
    max_len = max(params["window_len"] + 1, params["seq_len"])
    engines = {
        name: quality_engine(
            ctx, params, kv_pool_bytes=params["pool_bytes"], max_model_len=max_len, **overrides
        )
        for name, overrides in settings.items()
    }
    capacity = {name: fill_capacity(e, params["seq_len"]) for name, e in engines.items()}
    return engines, capacity


def record_pool(
    ctx: RunContext, engine: LLMEngine, capacity: int, *, trial: int, setting: str
) -> None:
    """The pool behind a capacity count: its format's bytes per token, pages and sequences."""
    per_token = engine.runner.kv_bytes_per_token
    ctx.record("kv_bytes_per_token", per_token, trial=trial, unit="bytes", setting=setting)
    ctx.record("num_pages", engine.runner.num_pages, trial=trial, unit="pages", setting=setting)
    ctx.record("capacity_seqs", capacity, trial=trial, unit="seqs", setting=setting)
