"""spec-vs-batching: the same draft-model speculation (k = 4) at batch 32.

Batching fills the idle compute that speculation also feeds on, so at batch 32 the claim
expects at most a 1.1x gain. Two engines, same pool and buckets, built one at a time and
taking turns within every trial, serve the same 32 held-out prompts per trial
(lab/speculative/spec_trials.py; the draft as in spec-decode-gain, ``draft_model``); per trial: the
speedup of output tokens/s over plain decoding (``speedup_at_b32``), the greedy mismatch
count and vLLM's acceptance metrics. The ``counterfactual`` param switches the speculative
arm's verifier off (spec_trials.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from claimbench.lab.engines.engine_settings import EngineSettings
from claimbench.lab.speculative.spec_trials import arm_settings, check_params, run_trials

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext
    from claimbench.models.config import ModelConfig

DEFAULT_PARAMS: dict[str, Any] = {
    "batch": 32,
    "num_spec_tokens": 4,
    "proposer": "draft",
    "input_len": 96,
    "output_len": 64,
    "draft_model": None,  # the shipped tiny draft, or a pinned checkpoint (draft_models.py)
    "engine": {},
    "counterfactual": "none",  # force-accept | force-reject: the verifier off (spec_trials.py)
    "device_step_s": 0.0,  # 0: the real device; else every timed step takes this long
}


def engines(params: dict[str, Any], model: ModelConfig | None, dtype: str) -> EngineSettings:
    """A plain and a speculative engine, one at a time (spec_trials.arm_settings)."""
    return arm_settings(params)


def run(ctx: RunContext) -> None:
    """Record speedup_at_b32 per trial, with the greedy mismatch count, each arm's
    throughput and the acceptance metrics beside it."""
    params = ctx.merged(DEFAULT_PARAMS)
    check_params(params)
    run_trials(ctx, params, engines(params, None, ctx.dtype).settings, "speedup_at_b32")
