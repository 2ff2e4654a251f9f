"""bf16-not-fp16: serving in float16 instead of bfloat16 buys neither speed nor fidelity.

The same checkpoint serves in bfloat16 and in float16 (computing and caching KV in that
dtype), one engine at a time, taking turns within every trial in ABBA order
(lab/engines/interleaved_arms.py): each engine is freed before the other is built (a 7B model's
two 16-bit engines do not fit one chip together), and a drift in machine speed over the run
falls on both formats alike. The float32 reference is
computed one decoder layer at a time (lab/quality/f32_reference.py: the checkpoint upcast to
float32, every matmul at full f32 precision), since a 7B model's f32 weights (30.5 GB) do not
fit beside anything on a 32 GB chip. Per trial:

* Fidelity: the trial's held-out windows go through the float32 reference and, as a prompt
  pass, through each 16-bit engine; each engine's top-1 agreement with the reference is the %
  of positions where it picks the same most likely next token, and fp16_minus_bf16_top1_pts =
  fp16's - bf16's (percentage points). Meaningful on any hardware.
* Speed: ``decode_batch`` sequences (``decode_prompt_len``-token held-out prompts) decode
  ``decode_tokens`` greedy tokens each on the bf16 and on the fp16 engine; decode tokens/s
  counts only decode-only steps (their host and device time), each engine's throughput in a
  trial is the mean of two runs, and fp16_speedup = fp16 / bf16, the two measured minutes
  apart at most (bf16 first in even trials, fp16 first in odd ones). The claim's
  scope is TPU, whose MXU takes bf16 natively; elsewhere speed is indicative only (on CPU,
  XLA emulates both 16-bit types, so the ratio reflects its CPU backend, not the formats).

Supporting metrics: every setting's perplexity (the reference's included), each engine's
prompt tokens/s, both agreements, both decode throughputs.

Counterfactual (``counterfactual``, lab/engines/counterfactuals.py): ``bf16-destroyed``, the bf16
engine serves a copy of the model whose every matrix holds two values per output channel
(lab/quality/destructive_quantizers.py: two_level_checkpoint); the fp16 engine and the float32
reference are unchanged, so fp16 is far closer to the reference than that bf16.
``bf16-slowed``, the bf16 engine's device takes ``BF16_SLOWED_S`` per step
(lab/engines/slow_device.py: its host waits that long for each step's outputs; the fp16 engine runs
on the real device), so the comparison must see fp16 faster: fp16_speedup well above 1.02 shows the
speed condition reads a real difference between the formats' steps.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np

from claimbench.engine.sampling_params import SamplingParams
from claimbench.harness.context import COMPILE_CACHE_DIR
from claimbench.lab.engines import counterfactuals
from claimbench.lab.engines.engine_settings import EngineSettings
from claimbench.lab.engines.interleaved_arms import interleaved_trials
from claimbench.lab.engines.slow_device import slow_device
from claimbench.lab.quality.destructive_quantizers import two_level_checkpoint
from claimbench.lab.quality.f32_reference import reference_pass
from claimbench.lab.quality.precision import (
    QUALITY_DEFAULTS,
    quality_options,
    record_pass,
    trial_windows,
    warm_up,
)
from claimbench.lab.quality.quality import PromptPass, prompt_pass, top1_agreement_pct

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext
    from claimbench.models.config import ModelConfig

DEFAULT_PARAMS: dict[str, Any] = QUALITY_DEFAULTS | {
    "decode_batch": 8,
    "decode_prompt_len": 32,
    "decode_tokens": 64,
    "counterfactual": counterfactuals.NONE,
}
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}  # the engines; float32 is the reference
COUNTERFACTUALS = ("bf16-destroyed", "bf16-slowed")
BF16_SLOWED_S = 0.2  # bf16-slowed's device step: many times a tiny model's on a CPU


def decode_tokens_per_s(engine: LLMEngine, prompts: np.ndarray, num_tokens: int) -> float:
    """Serve prompts i32[batch, len] to ``num_tokens`` greedy outputs each; decode tokens per
    second of decode-only steps (prefill steps excluded)."""
    first_step = len(engine.step_records)
    engine.generate(
        [p.tolist() for p in prompts], SamplingParams(max_tokens=num_tokens, ignore_eos=True)
    )
    steps = engine.steps_frame().iloc[first_step:]
    decode = steps[steps["num_prefill_tokens"] == 0]
    seconds = float((decode["host_s"] + decode["device_s"]).sum())
    return float(decode["num_decode_tokens"].sum()) / seconds


def engines(params: dict[str, Any], model: ModelConfig | None, dtype: str) -> EngineSettings:
    """A bf16 and an fp16 engine (KV in the model dtype), one at a time; the float32 side is
    a layer-by-layer reference (lab/quality/f32_reference.py), not an engine."""
    max_len = max(params["window_len"], params["decode_prompt_len"] + params["decode_tokens"]) + 1
    options = {
        setting: quality_options(
            params,
            dtype=DTYPES[setting],
            kv_dtype="auto",
            max_model_len=max_len,
            max_num_seqs=params["decode_batch"],
        )
        for setting in DTYPES
    }
    return EngineSettings(options, one_at_a_time=True)


def run(ctx: RunContext) -> None:
    """Record fp16_speedup and fp16_minus_bf16_top1_pts (and supporting numbers) per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    if params["decode_batch"] > params["num_windows"]:
        raise ValueError(
            f"decode prompts come from the windows: decode_batch={params['decode_batch']} "
            f"> num_windows={params['num_windows']}"
        )
    if not 1 <= params["decode_prompt_len"] <= params["window_len"]:
        raise ValueError(
            f"decode_prompt_len={params['decode_prompt_len']} must be in "
            f"[1, window_len={params['window_len']}]"
        )
    windows = [trial_windows(ctx, params, trial) for trial in range(ctx.trials)]
    reference = [reference_pass(ctx.model_path, w) for w in windows]
    for trial, ref in enumerate(reference):
        ctx.record("perplexity", ref.perplexity, trial=trial, setting="f32")
    options = engines(params, None, ctx.dtype).settings
    counterfactual = counterfactuals.chosen(params, COUNTERFACTUALS)
    if counterfactual == "bf16-destroyed":
        # In the compile cache, kept by content: provenance hashes it after the run.
        destroyed = two_level_checkpoint(ctx.model_path, COMPILE_CACHE_DIR / "two-level-models")
        options["bf16"] = options["bf16"] | {"model_path": destroyed}
    batch, prompt_len = params["decode_batch"], params["decode_prompt_len"]

    def warm(setting: str, engine: LLMEngine) -> None:
        # An unrecorded pass and decode: every timing is of compiled steps.
        warm_up({setting: engine}, windows[0])
        decode_tokens_per_s(engine, windows[0][:batch, :prompt_len], params["decode_tokens"])

    measured = interleaved_trials(
        ctx,
        options,
        lambda s, e, t: _measure(
            ctx, params, windows[t], s, e, t, slowed=counterfactual == "bf16-slowed"
        ),
        on_build=warm,
    )
    for trial, ref in enumerate(reference):
        agree = {s: top1_agreement_pct(measured[s][trial][0], ref) for s in DTYPES}
        speed = {s: measured[s][trial][1] for s in DTYPES}
        ctx.record("fp16_minus_bf16_top1_pts", agree["fp16"] - agree["bf16"], trial=trial)
        ctx.record("fp16_speedup", speed["fp16"] / speed["bf16"], trial=trial)
        for setting in ("bf16", "fp16"):
            ctx.record("top1_vs_f32_pct", agree[setting], trial=trial, unit="%", setting=setting)
            ctx.record(
                "decode_tokens_per_s", speed[setting], trial=trial, unit="tok/s", setting=setting
            )


def _measure(
    ctx: RunContext,
    params: dict[str, Any],
    window_set: np.ndarray,
    setting: str,
    engine: LLMEngine,
    trial: int,
    *,
    slowed: bool = False,
) -> tuple[PromptPass, float]:
    """One engine on one trial: (its prompt pass, its decode tokens/s), its frames saved;
    ``slowed`` (bf16-slowed): the bf16 engine decodes on a device of BF16_SLOWED_S per step."""
    prompt_len, batch, tokens = (
        params["decode_prompt_len"],
        params["decode_batch"],
        params["decode_tokens"],
    )
    engine.reset()  # this trial's records only
    result = prompt_pass(engine, window_set)
    record_pass(ctx, result, trial=trial, setting=setting)
    prompts = window_set[:batch, :prompt_len]
    slow = slow_device(engine, BF16_SLOWED_S) if slowed and setting == "bf16" else nullcontext()
    with slow:
        runs = [decode_tokens_per_s(engine, prompts, tokens) for _ in range(2)]
    ctx.save_frames(
        requests=engine.requests_frame(), steps=engine.steps_frame(), setting=setting, trial=trial
    )
    return result, float(np.mean(runs))
