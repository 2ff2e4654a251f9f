"""bf16-not-fp16: serving in float16 instead of bfloat16 buys neither speed nor fidelity.

Three engines serve the same checkpoint, computing (and caching KV) in float32, bfloat16
and float16. Per trial:

* Fidelity: the trial's held-out windows go through all three as a prompt pass; each
  16-bit engine's top-1 agreement with the float32 reference is the % of positions where it
  picks the same most likely next token, and fp16_minus_bf16_top1_pts = fp16's - bf16's
  (percentage points). Meaningful on any hardware.
* Speed: ``decode_batch`` sequences (``decode_prompt_len``-token held-out prompts) decode
  ``decode_tokens`` greedy tokens each on the bf16 and on the fp16 engine; decode tokens/s
  counts only decode-only steps (their host and device time), and fp16_speedup = fp16 /
  bf16. Each trial times the two in an ABBA order (bf16, fp16, fp16, bf16, each dtype's
  throughput the mean of its two runs) and the next trial in BAAB, so a drift in machine
  speed within a trial cancels to first order and across trials alternates. The claim's scope is
  TPU, whose MXU takes bf16 natively; elsewhere speed is indicative only (on CPU, XLA
  emulates both 16-bit types, so the ratio reflects its CPU backend, not the formats).

Supporting metrics: every setting's perplexity and tokens/s, both agreements, both decode
throughputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from claimbench.engine.sampler import SamplingParams
from claimbench.harness.precision import (
    QUALITY_DEFAULTS,
    quality_options,
    run_passes,
    save_engine_frames,
    trial_windows,
    warm_up,
)
from claimbench.harness.quality import top1_agreement_pct

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = QUALITY_DEFAULTS | {
    "decode_batch": 8,
    "decode_prompt_len": 32,
    "decode_tokens": 64,
}
DTYPES = {"f32": "float32", "bf16": "bfloat16", "fp16": "float16"}


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
    max_len = max(params["window_len"], params["decode_prompt_len"] + params["decode_tokens"]) + 1
    engines = {
        setting: ctx.engine(
            **quality_options(
                params,
                dtype=dtype,
                kv_dtype="auto",
                max_model_len=max_len,
                max_num_seqs=params["decode_batch"],
            )
        )
        for setting, dtype in DTYPES.items()
    }
    first = trial_windows(ctx, params, 0)
    warm_up(engines, first)
    prompt_len, batch = params["decode_prompt_len"], params["decode_batch"]
    for setting in ("bf16", "fp16"):
        decode_tokens_per_s(engines[setting], first[:batch, :prompt_len], params["decode_tokens"])
    for trial in range(ctx.trials):
        windows = trial_windows(ctx, params, trial)
        passes = run_passes(ctx, engines, windows, trial=trial)
        agree = {s: top1_agreement_pct(passes[s], passes["f32"]) for s in ("bf16", "fp16")}
        ctx.record("fp16_minus_bf16_top1_pts", agree["fp16"] - agree["bf16"], trial=trial)
        prompts = windows[:batch, :prompt_len]
        lead, follow = ("bf16", "fp16") if trial % 2 == 0 else ("fp16", "bf16")
        runs: dict[str, list[float]] = {"bf16": [], "fp16": []}
        for s in (lead, follow, follow, lead):
            runs[s].append(decode_tokens_per_s(engines[s], prompts, params["decode_tokens"]))
        speed = {s: float(np.mean(v)) for s, v in runs.items()}
        ctx.record("fp16_speedup", speed["fp16"] / speed["bf16"], trial=trial)
        for setting in ("bf16", "fp16"):
            ctx.record("top1_vs_f32_pct", agree[setting], trial=trial, unit="%", setting=setting)
            ctx.record(
                "decode_tokens_per_s", speed[setting], trial=trial, unit="tok/s", setting=setting
            )
    save_engine_frames(ctx, engines)
