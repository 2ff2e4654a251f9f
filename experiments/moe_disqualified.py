"""moe-disqualified: an 8-expert top-2 MoE at the dense model's active parameters, on one chip.

Analytic (once, with the formula's inputs): the dense ``model`` preset (default Llama-3.1-8B,
the full profile's model class) against its MoE twin at equal active parameters: the same
layout, ``num_experts`` SwiGLU experts of intermediate size intermediate / ``experts_per_token``,
so the chosen experts hold exactly the dense MLP's units (the router's hidden x E weights per
layer are the only extra active weights). Both in bf16 on one ``chip`` (hardware/chips.py):

* weight_ratio = MoE weight bytes / dense weight bytes;
* kv_room_ratio = MoE KV room / dense KV room, where a model's KV room is the chip's HBM less
  its weights, and zero when the weights alone overflow the chip (activations and the runtime's
  own buffers are left out: they take the same bytes from both and only lower the ratio).

The byte counts are recorded beside them, and experts_touched_pct_uniform_b32, the
uniform-routing formula (1 - (1 - k/E)^32), as a labelled side metric: the claim's third
condition is measured, not this formula.

Measured (per trial): the engine serves the trained MoE (``moe_model``, default the shipped
claimbench-tiny-moe) on ``batch`` held-out prompts submitted together (greedy, EOS ignored,
``max_num_seqs`` = ``batch``). Each step
record carries, per layer, the distinct experts the step's real tokens were routed to (from
the router, on device). Over the steps that decode all ``batch`` sequences and nothing else,
a step's touched percentage is its touched experts over all layers' experts; the trial records
experts_touched_pct_b32 = the lowest such step (the claim says "in every decode step"), and
experts_touched_mean_pct_b32 = their mean, as a side metric.

Counterfactual (``counterfactual``, lab/engines/counterfactuals.py): ``same-prompt`` serves one
prompt ``batch`` times, so the batch carries one sequence's routing instead of 32 different ones and
every step touches only the experts one token picks (the diversity of a batch is the claim's
mechanism).

Params: model, num_experts, experts_per_token, chip (analytic); moe_model, batch, prompt_len
([min, max] tokens), output_len, ``engine``, counterfactual (measured).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from claimbench.hardware.chips import get_chip
from claimbench.hardware.model_presets import ModelShape, get_preset
from claimbench.hardware.roofline import expert_fraction_touched, weight_bytes
from claimbench.lab.engines import counterfactuals
from claimbench.lab.engines.engine_settings import EngineSettings

if TYPE_CHECKING:
    import pandas as pd

    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext
    from claimbench.models.config import ModelConfig

DEFAULT_PARAMS: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "num_experts": 8,
    "experts_per_token": 2,
    "chip": "v6e",
    "moe_model": None,  # None: the shipped claimbench-tiny-moe
    "batch": 32,
    "prompt_len": [32, 96],
    "output_len": 24,
    "engine": {},
    "counterfactual": counterfactuals.NONE,
}


def moe_twin(dense: ModelShape, num_experts: int, experts_per_token: int) -> ModelShape:
    """``dense`` with its MLP split into experts so that ``experts_per_token`` of them hold
    exactly its intermediate units: equal active parameters (plus the router)."""
    if dense.num_experts != 1:
        raise ValueError(f"{dense.name} is already a mixture of experts")
    if dense.intermediate_size % experts_per_token:
        raise ValueError(
            f"{dense.name}: intermediate_size={dense.intermediate_size} does not split into "
            f"{experts_per_token} experts per token"
        )
    return replace(
        dense,
        name=f"{dense.name}-{num_experts}x-top{experts_per_token}",
        intermediate_size=dense.intermediate_size // experts_per_token,
        num_experts=num_experts,
        experts_per_token=experts_per_token,
    )


def record_analytic(ctx: RunContext, params: dict[str, Any]) -> None:
    """weight_ratio, kv_room_ratio and their byte counts, once each, with the inputs."""
    dense = get_preset(params["model"])
    moe = moe_twin(dense, params["num_experts"], params["experts_per_token"])
    chip = get_chip(params["chip"])
    dense_bytes, moe_bytes = weight_bytes(dense, "bf16"), weight_bytes(moe, "bf16")
    dense_room = chip.hbm_bytes - dense_bytes
    if dense_room <= 0:
        raise ValueError(
            f"{dense.name}'s bf16 weights ({dense_bytes} bytes) do not fit one {chip.name} "
            f"({chip.hbm_bytes:.0f} bytes of HBM)"
        )
    moe_room = max(0.0, chip.hbm_bytes - moe_bytes)
    inputs = {
        "dense_layout": asdict(dense),
        "moe_layout": asdict(moe),
        "dense_params": dense.num_params,
        "moe_params": moe.num_params,
        "dense_active_params": dense.num_active_params,
        "moe_active_params": moe.num_active_params,
        "dtype": "bf16",
        "chip": chip.name,
        "hbm_bytes": chip.hbm_bytes,
    }
    labels = {"model": dense.name, "chip": chip.name}
    ctx.record_analytic("weight_ratio", moe_bytes / dense_bytes, unit="x", inputs=inputs, **labels)
    ctx.record_analytic("kv_room_ratio", moe_room / dense_room, unit="x", inputs=inputs, **labels)
    for metric, value in (
        ("dense_weight_bytes", dense_bytes),
        ("moe_weight_bytes", moe_bytes),
        ("dense_kv_room_bytes", dense_room),
        ("moe_kv_room_bytes", moe_room),
    ):
        ctx.record_analytic(metric, value, unit="bytes", inputs=inputs, **labels)
    batch = params["batch"]
    ctx.record_analytic(
        f"experts_touched_pct_uniform_b{batch}",
        100 * expert_fraction_touched(moe, batch),
        unit="%",
        inputs={"num_experts": moe.num_experts, "experts_per_token": moe.experts_per_token}
        | {"num_tokens": batch, "routing": "uniform, independent"},
        **labels,
    )


def touched_pct_per_step(steps: pd.DataFrame, batch: int, num_experts: int) -> np.ndarray:
    """f64[steps]: for every step that decodes exactly ``batch`` sequences and nothing else, the
    percentage of all layers' experts its real tokens were routed to."""
    pure = steps[(steps.num_decode_seqs == batch) & (steps.num_prefill_seqs == 0)]
    return np.asarray(
        [100 * sum(t) / (len(t) * num_experts) for t in pure.experts_touched], np.float64
    )


def engines(params: dict[str, Any], model: ModelConfig | None, dtype: str) -> EngineSettings:
    """One engine over the experiment's own MoE (``moe_model``, else the shipped
    claimbench-tiny-moe) that admits ``batch`` prompts together."""
    return EngineSettings(
        {
            "": dict(
                # All prompts are admitted together; once the last prefill is done, every step
                # decodes ``batch`` sequences, as a server at steady state with ``batch`` in
                # flight.
                max_num_seqs=params["batch"],
                max_model_len=params["prompt_len"][1] + params["output_len"],
                prefix_caching="off",
            )
        },
        own_model=params["moe_model"] or "claimbench-tiny-moe",
    )


def moe_engine(ctx: RunContext, params: dict[str, Any], path: Path) -> LLMEngine:
    """An engine over the MoE at ``path`` that admits ``batch`` prompts together."""
    from claimbench.models.checkpoint import read_config

    if not read_config(path).is_moe:
        raise ValueError(f"param moe_model {path} is not a mixture of experts")
    return ctx.engine(model_path=path, **engines(params, None, ctx.dtype).settings[""])


def measure_trial(
    ctx: RunContext, params: dict[str, Any], engine: LLMEngine, path: Path, trial: int
) -> np.ndarray:
    """Serve ``batch`` held-out prompts together; the touched percentage of each pure decode
    step at that batch."""
    from claimbench.engine.sampling_params import SamplingParams
    from claimbench.models.checkpoint import read_config
    from claimbench.models.tokenizer import Tokenizer
    from claimbench.workload.corpus import heldout_prompts

    batch, (min_len, max_len) = params["batch"], params["prompt_len"]
    seed = int(np.random.SeedSequence([ctx.seed, trial]).generate_state(1)[0])
    prompts = heldout_prompts(Tokenizer.from_dir(path), batch, min_len, max_len, seed)
    if params["counterfactual"] == "same-prompt":
        prompts = [prompts[0]] * batch
    engine.reset()
    engine.generate(prompts, SamplingParams(max_tokens=params["output_len"], ignore_eos=True))
    steps = engine.steps_frame()
    ctx.save_frames(steps=steps, trial=trial)
    pct = touched_pct_per_step(steps, batch, read_config(path).num_experts)
    if len(pct) == 0:
        raise RuntimeError(f"no step decoded exactly {batch} sequences")
    return pct


def run(ctx: RunContext) -> None:
    """Analytic ratios once; experts touched per decode step at ``batch`` per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    counterfactuals.chosen(params, ("same-prompt",))
    lengths = params["prompt_len"]
    if not (isinstance(lengths, list) and len(lengths) == 2 and 2 <= lengths[0] <= lengths[1]):
        raise ValueError(f"param prompt_len must be [min, max] with 2 <= min <= max, got {lengths}")
    for key in ("batch", "output_len"):
        if not isinstance(params[key], int) or params[key] < 2:
            raise ValueError(f"param {key} must be an integer >= 2, got {params[key]!r}")
    record_analytic(ctx, params)
    from claimbench.models.checkpoint import default_moe_path

    path = Path(params["moe_model"]) if params["moe_model"] else default_moe_path()
    engine = moe_engine(ctx, params, path)
    batch = params["batch"]
    labels = {"model": path.name, "batch": batch}
    for trial in range(ctx.trials):
        pct = measure_trial(ctx, params, engine, path, trial)
        ctx.record(f"experts_touched_pct_b{batch}", pct.min(), trial=trial, unit="%", **labels)
        mean_metric = f"experts_touched_mean_pct_b{batch}"
        ctx.record(mean_metric, pct.mean(), trial=trial, unit="%", **labels)
