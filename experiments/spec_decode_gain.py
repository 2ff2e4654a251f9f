"""spec-decode-gain: draft-model speculation (k = 4) against plain decoding at batch 1.

The shipped claimbench-tiny-draft proposes 4 tokens a step for claimbench-tiny (the full
profile pins Qwen2.5-0.5B-Instruct for Qwen2.5-7B-Instruct: ``draft_model``); the target
verifies them in one step (exact greedy acceptance, engine/worker/acceptance.py). Two engines,
same pool and buckets, built one at a time and taking turns within every trial, serve the
same held-out prompt per trial (lab/speculative/spec_trials.py); per trial:
the speedup of output tokens/s over plain decoding, the greedy mismatch count (tokens that
differ from plain decoding's; float32 is batch-invariant, bfloat16 may flip a near-tie)
with its positive control (greedy_mismatch_control: the speculative engine with its
verifier forced to accept every draft token, which must differ from the target's output for
a zero mismatch to mean anything), and vLLM's acceptance metrics. The ``counterfactual``
param switches the speculative arm's verifier off (spec_trials.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from claimbench.lab.engines.engine_settings import EngineSettings
from claimbench.lab.speculative.spec_trials import arm_settings, check_params, run_trials

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext
    from claimbench.models.config import ModelConfig

DEFAULT_PARAMS: dict[str, Any] = {
    "batch": 1,
    "num_spec_tokens": 4,
    "proposer": "draft",
    "input_len": 96,
    "output_len": 128,
    "draft_model": None,  # the shipped tiny draft, or a pinned checkpoint (draft_models.py)
    "engine": {},
    "counterfactual": "none",  # force-accept | force-reject: the verifier off (spec_trials.py)
    "device_step_s": 0.0,  # 0: the real device; else every timed step takes this long
}


def engines(params: dict[str, Any], model: ModelConfig | None, dtype: str) -> EngineSettings:
    """A plain and a speculative engine, one at a time (spec_trials.arm_settings)."""
    return arm_settings(params)


def run(ctx: RunContext) -> None:
    """Record speedup, greedy_mismatch and its control per trial, with each arm's throughput
    and the acceptance metrics beside them."""
    params = ctx.merged(DEFAULT_PARAMS)
    check_params(params)
    run_trials(ctx, params, engines(params, None, ctx.dtype).settings, "speedup", control=True)
