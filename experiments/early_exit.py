"""early-exit: layers skipped per token at batch 1, and the step time saved at batch 32.

Workload: closed batches of ``prompt_len``-token prompts cut from held-out text (BOS, then
the start of a line of a held-out document: a model is only confident on text like its
training data, never on random tokens) and ``output_len`` greedy output tokens each (EOS
ignored), all submitted at once, served by the engine with early exit
(``early_exit_threshold``: the param, or else the threshold saved with the model's exit
heads) and, at batch 32, also without it.

* ``layers_skipped_pct_b1``: one request served with early exit; over its decode tokens,
  100 x mean(num_layers - layers run) / num_layers, from the per-token exit layers the
  device reports (StepRecord.exit_layers).
* ``step_saving_pct_b32``: the step time that exiting saves, with the exit machinery's own
  cost accounted separately. ``batch_large`` requests are served by three engines (the order
  rotated across trials so drift favours none): early exit at the threshold ("on"), the same
  exit machinery at a threshold no token reaches ("never": exit heads, confidences and the
  per-layer conds, every layer run) and without early exit ("off"). Over the full-batch decode
  steps, each step's period (its start to the next step's start), the median of each arm;
  saving = 100 x (1 - on / never). Comparing against "off" would charge the exit heads' cost
  to the saving (on a small model it outweighs any saving, so "at most 5%" could not fail);
  that cost is recorded beside it, ``exit_overhead_pct_b32`` = 100 x (never / off - 1), and
  the net change ``step_time_saving_vs_off_pct_b32`` = 100 x (1 - on / off).

Counterfactuals (``counterfactual``, lab/engines/counterfactuals.py), the exit decision replaced:
``forced-exit`` (threshold 0: every decode token exits at the first exit layer, so a batched
step skips every later layer however large the batch) and ``never-exit`` (the "on" engine's
threshold is "never"'s: no layer is skipped).

Context: at batch 32 the per-token layers skipped and the share of steps that ran every
layer (a step runs until its slowest token exits); the held-out quality the exit heads were
saved with (top-1 agreement with the full model, perplexity with and without exit, on the
dense forward) at the threshold used, and whether the batch-32 arms emitted the same tokens.

Quality as served (lab/quality/exit_quality.py), where exited tokens' later-layer K/V are their
propagated hidden state: per trial, the share of the batch-32 arms' greedy output positions
that agree (``greedy_token_agreement_b32``) and the mean leading tokens before the first
difference; once, ``quality_windows`` held-out windows of ``quality_len`` tokens fed one
decode step per token through the propagated-K/V path, at the threshold and never exiting:
``served_top1_agreement``, ``served_ppl_exit``, ``served_ppl_full``,
``served_layers_skipped_pct``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from claimbench.engine.config import DEFAULT_PAGE_SIZE
from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.engines import counterfactuals
from claimbench.lab.load.tenant_runs import kv_pool_bytes, rotated
from claimbench.lab.quality.exit_quality import NEVER_EXIT, greedy_agreement, teacher_forced
from claimbench.models.checkpoint import load_model
from claimbench.models.exit_heads import load_exit_heads, read_exit_config
from claimbench.workload.corpus import heldout_prompts, heldout_token_windows

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext
    from claimbench.models.tokenizer import Tokenizer

DEFAULT_PARAMS: dict[str, Any] = {
    "batch_small": 1,
    "batch_large": 32,
    "prompt_len": 64,
    "output_len": 64,
    "threshold": None,  # None: the threshold saved beside the exit heads
    "quality_windows": 16,  # held-out windows teacher-forced through propagated K/V
    "quality_len": 256,  # predicted tokens per window
    "engine": {},
    "counterfactual": counterfactuals.NONE,
}
MODES = ("off", "never", "on")
# The "on" engine's threshold under each counterfactual: 0 exits every token at the first
# exit layer; NEVER_EXIT exits none.
COUNTERFACTUAL_THRESHOLDS = {"forced-exit": 0.0, "never-exit": NEVER_EXIT}


def serve(engine: LLMEngine, prompts: list[list[int]], output_len: int) -> pd.DataFrame:
    """Serve the prompts together on a fresh record; returns the steps frame."""
    engine.reset()
    sampling = SamplingParams(max_tokens=output_len, ignore_eos=True)
    for prompt in prompts:
        engine.add_request(prompt, sampling)
    while engine.has_unfinished:
        engine.step()
    return engine.steps_frame()


def decode_steps(steps: pd.DataFrame, batch: int) -> pd.DataFrame:
    """The full-batch decode steps that have a successor, with their ``period_s``."""
    starts = steps["start_s"].to_numpy()
    full = ((steps["num_seqs"] == batch) & (steps["num_decode_seqs"] == batch)).to_numpy()
    index = np.flatnonzero(full)
    index = index[index + 1 < len(steps)]
    return steps.iloc[index].assign(period_s=starts[index + 1] - starts[index])


def layers_skipped_pct(steps: pd.DataFrame, num_layers: int) -> float:
    """100 x mean(num_layers - layers run) / num_layers over every token of ``steps``."""
    layers = np.concatenate([np.asarray(x, np.int64) for x in steps["exit_layers"]])
    if layers.size == 0:
        raise RuntimeError("the early-exit steps reported no exit layers")
    return float(100.0 * (num_layers - layers).mean() / num_layers)


def _check(params: dict[str, Any]) -> None:
    for key in (
        "batch_small",
        "batch_large",
        "prompt_len",
        "output_len",
        "quality_windows",
        "quality_len",
    ):
        value = params[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"param {key} must be a positive integer, got {value!r}")
    if params["output_len"] < 3:
        raise ValueError(f"param output_len must be >= 3, got {params['output_len']}")
    threshold = params["threshold"]
    if threshold is not None and (isinstance(threshold, bool) or not threshold >= 0):
        raise ValueError(f"param threshold must be a number >= 0 or null, got {threshold!r}")


def record_served_quality(
    ctx: RunContext, params: dict[str, Any], threshold: float, tokenizer: Tokenizer
) -> None:
    """Teacher-forced held-out quality through the propagated-K/V path (deterministic: once)."""
    dtype = params["engine"].get("dtype", ctx.dtype)
    model, _ = load_model(ctx.model_path, dtype)
    heads = load_exit_heads(ctx.model_path, model)
    windows = heldout_token_windows(
        tokenizer, params["quality_windows"], params["quality_len"] + 1, ctx.seed
    )
    backend = params["engine"].get("attention_backend", "auto")
    quality = teacher_forced(model, heads, threshold, windows, attention_backend=backend)
    for name in ("top1_agreement", "ppl_exit", "ppl_full", "layers_skipped_pct"):
        ctx.record(f"served_{name}", getattr(quality, name), trial=0, num_tokens=quality.num_tokens)


def run(ctx: RunContext) -> None:
    """Record layers_skipped_pct_b1 and step_saving_pct_b32 per trial, with context."""
    params = ctx.merged(DEFAULT_PARAMS)
    _check(params)
    counterfactual = counterfactuals.chosen(params, tuple(COUNTERFACTUAL_THRESHOLDS))
    small, large = params["batch_small"], params["batch_large"]
    prompt_len, output_len = params["prompt_len"], params["output_len"]
    engine_params = params["engine"]
    overrides: dict[str, Any] = {"max_num_seqs": large, "prefix_caching": "off"}
    if "kv_pool_bytes" not in engine_params:
        page_size = engine_params.get("page_size", DEFAULT_PAGE_SIZE)
        pages = large * -(-(prompt_len + output_len) // page_size)
        overrides["kv_pool_bytes"] = kv_pool_bytes(ctx, engine_params, pages)
    engines = {"off": ctx.engine(precompile=True, **overrides)}
    saved = read_exit_config(ctx.model_path)
    threshold = saved["threshold"] if params["threshold"] is None else params["threshold"]
    threshold = COUNTERFACTUAL_THRESHOLDS.get(counterfactual, threshold)
    engines["never"] = ctx.engine(precompile=True, early_exit_threshold=NEVER_EXIT, **overrides)
    engines["on"] = ctx.engine(precompile=True, early_exit_threshold=threshold, **overrides)
    num_layers = engines["on"].model_cfg.num_layers
    vocab = engines["on"].model_cfg.vocab_size
    tokenizer = engines["on"].tokenizer
    if tokenizer is None:
        raise ValueError("early-exit prompts are held-out text: the model needs a tokenizer")
    warm = np.random.default_rng([ctx.seed, 1]).integers(3, vocab, size=(large, prompt_len))
    for engine in engines.values():
        serve(engine, warm.tolist(), 3)
    for trial in range(ctx.trials):
        prompts = heldout_prompts(tokenizer, large, prompt_len, prompt_len, ctx.seed + trial)
        steps = serve(engines["on"], prompts[:small], output_len)
        b1 = decode_steps(steps, small)
        ctx.save_frames(steps=steps, mode="on", batch=small, trial=trial)
        skipped = layers_skipped_pct(b1, num_layers)
        ctx.record("layers_skipped_pct_b1", skipped, trial=trial, unit="%")
        medians, tokens = {}, {}
        for mode in rotated(MODES, trial):
            start = time.perf_counter()
            steps = serve(engines[mode], prompts, output_len)
            ctx.save_frames(steps=steps, mode=mode, batch=large, trial=trial)
            full = decode_steps(steps, large)
            if full.empty:
                raise RuntimeError(f"early exit {mode}: no full-batch decode step ran")
            medians[mode] = float(full["period_s"].median())
            tokens[mode] = [engines[mode].output(r).token_ids for r in engines[mode].requests]
            ctx.record(
                "decode_step_s", medians[mode], trial=trial, unit="s", mode=mode, batch=large
            )
            ctx.record("serve_s", time.perf_counter() - start, trial=trial, unit="s", mode=mode)
            if mode == "on":
                pct = layers_skipped_pct(full, num_layers)
                ctx.record("layers_skipped_pct_b32", pct, trial=trial, unit="%")
                ran_all = float(np.mean([max(x) == num_layers for x in full["exit_layers"]]))
                ctx.record("steps_running_all_layers_b32", ran_all, trial=trial, unit="share")
        saving = 100.0 * (1.0 - medians["on"] / medians["never"])
        ctx.record("step_saving_pct_b32", saving, trial=trial, unit="%", threshold=threshold)
        overhead = 100.0 * (medians["never"] / medians["off"] - 1.0)
        ctx.record("exit_overhead_pct_b32", overhead, trial=trial, unit="%")
        net = 100.0 * (1.0 - medians["on"] / medians["off"])
        ctx.record("step_time_saving_vs_off_pct_b32", net, trial=trial, unit="%")
        same = float(tokens["on"] == tokens["off"])
        ctx.record("arms_outputs_match_b32", same, trial=trial, unit="bool")
        share, leading = greedy_agreement(tokens["on"], tokens["off"])
        ctx.record("greedy_token_agreement_b32", share, trial=trial, unit="share")
        ctx.record("greedy_leading_agree_b32", leading, trial=trial, unit="tokens")
    record_served_quality(ctx, params, threshold, tokenizer)
    quality = saved.get("quality", {}).get(str(float(threshold)))
    if quality is not None:
        # Measured once when the heads were trained (exit_train.py), on held-out text.
        for name in ("top1_agreement", "ppl_exit", "ppl_full", "layers_skipped_pct"):
            ctx.record(f"heldout_{name}", quality[name], trial=0, source="early_exit.json")
