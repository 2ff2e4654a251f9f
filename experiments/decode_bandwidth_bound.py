"""decode-bandwidth-bound: decode step time against the memory-bandwidth roofline, and MFU.

Workload: for each batch size in ``batches``, a closed batch of that many requests with
``prompt_len`` random prompt tokens and ``output_len`` output tokens (EOS ignored), served
alone on a fresh engine state, async scheduling off so each step's ``device_s`` (dispatch to
outputs ready) is the step's own time. Only full-batch decode steps count; decode step k
attends ``prompt_len + k + 1`` cached tokens per sequence.

The roofline of each step (hardware/decode_roofline.py) is the bytes it must move (every
weight once, the batch's cached K/V, the new K/V) over the memory bandwidth, in the dtypes the
engine stores them in. The bandwidth and peak FLOP/s are the chip spec's on a TPU or GPU (the
claim is about a chip's HBM roofline); on a CPU, which has no such spec, they are measured on
this host by a streaming probe and a matmul probe (lab/probes/memory_probe.py) and the
comparison is shown as the CPU's own, indicative. Both probes are recorded every trial.

Per trial and batch: the median full-batch decode step, its roofline, their ratio and the
MFU (useful FLOPs / step time / peak), labelled ``batch``. The claim's metrics per trial are
the worst over the batches: ``step_over_roofline`` (the largest ratio) and ``mfu_pct`` (the
largest MFU), since it says every batch up to 32 stays within 1.3x and under 10%.

Counterfactual (``counterfactual``, lab/engines/counterfactuals.py): ``one-bucket`` pads every step
to the token budget (the engine's one token bucket), so a decode step of a few sequences
computes a budget's worth of tokens and moves the same bytes: a step the weights' streaming no
longer bounds. ``attained-peak`` measures MFU against the highest FLOP/s any of the trial's
decode steps reached instead of the chip's (or the matmul probe's) peak: a device whose
compute the decode steps saturate, as a compute-bound one's would. MFU is the steps' FLOP rate
over a peak, so it crosses 10% exactly when the steps run near the peak they are measured
against; no engine change reaches that on a CPU at tiny size (a tiny step's FLOP rate is
orders below a matmul's, whatever its batch), so the peak is the one thing changed, and the
steps, their FLOPs and their times are the registered run's.

Param ``device`` ({}: the real device): ``{bytes_per_s, flops_per_s}`` runs the engine on a
device of known physics (lab/engines/roofline_device.py: every step takes its own roofline
time, padded tokens' FLOPs included) and compares against that device's bandwidth and peak. On
a CPU at tiny size the registered run lands wherever this host's physics puts it; on the
modeled device the tests show the conditions read either side: a memory-bound decode within
its byte roofline and under 10% MFU, and the counterfactuals past both thresholds.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np

from claimbench.engine.config import DEFAULT_PAGE_SIZE
from claimbench.engine.kv.kv_cache import pool_bytes_for, resolve_kv_dtype
from claimbench.engine.sampling_params import SamplingParams
from claimbench.hardware.chips import get_chip
from claimbench.hardware.decode_roofline import decode_bytes, weight_storage_bytes
from claimbench.hardware.model_presets import shape_from_config
from claimbench.lab.engines import counterfactuals
from claimbench.lab.engines.engine_settings import EngineSettings
from claimbench.lab.engines.roofline_device import RooflineDevice, step_law
from claimbench.lab.engines.slow_device import slow_device
from claimbench.lab.load.tenant_runs import reset_with
from claimbench.lab.probes.memory_probe import matmul_flops_per_s, stream_bytes_per_s
from claimbench.models.checkpoint import read_config

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.hardware.model_presets import ModelShape
    from claimbench.harness.context import RunContext
    from claimbench.models.config import ModelConfig

DEFAULT_PARAMS: dict[str, Any] = {
    "batches": [1, 2, 4, 8, 16, 32],
    "prompt_len": 128,
    "output_len": 32,
    "engine": {},
    "device": {},  # {}: the real device; {bytes_per_s, flops_per_s}: a modeled one
    "counterfactual": counterfactuals.NONE,
}


def _check(params: dict[str, Any]) -> None:
    batches = params["batches"]
    if (
        not isinstance(batches, list)
        or not batches
        or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in batches)
    ):
        raise ValueError(f"param batches must be a list of positive integers, got {batches!r}")
    for key in ("prompt_len", "output_len"):
        value = params[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"param {key} must be a positive integer, got {value!r}")
    if params["output_len"] < 3:
        raise ValueError(f"param output_len must be >= 3, got {params['output_len']}")


def engines(params: dict[str, Any], model: ModelConfig | None, dtype: str) -> EngineSettings:
    """One engine for the largest batch, async scheduling off (each step's own device time);
    unless the engine params give a pool, one that holds the largest batch's sequences of the
    served ``model`` exactly (none without a model)."""
    engine_params = params["engine"]
    max_batch = max(params["batches"])
    options: dict[str, Any] = dict(
        max_num_seqs=max_batch, prefix_caching="off", async_scheduling=False
    )
    if "kv_pool_bytes" not in engine_params and model is not None:
        page_size = engine_params.get("page_size", DEFAULT_PAGE_SIZE)
        pages = max_batch * -(-(params["prompt_len"] + params["output_len"]) // page_size)
        options["kv_pool_bytes"] = pool_bytes_for(model, {"dtype": dtype} | engine_params, pages)
    return EngineSettings({"": options})


def decode_steps_s(engine: LLMEngine, prompts: list[list[int]], output_len: int) -> np.ndarray:
    """Serve the prompts together; the device time of each full-batch decode step, in order."""
    sampling = SamplingParams(max_tokens=output_len, ignore_eos=True)
    for prompt in prompts:
        engine.add_request(prompt, sampling)
    while engine.has_unfinished:
        engine.step()
    steps = engine.steps_frame()
    batch = len(prompts)
    full = steps[(steps["num_seqs"] == batch) & (steps["num_decode_seqs"] == batch)]
    return full["device_s"].to_numpy()


MEASURED_SOURCE = "measured on this host"
MODELED_SOURCE = "modeled device"


def _context(
    ctx: RunContext, metric: str, value: float, unit: str, trial: int, measured: bool, **labels: Any
) -> None:
    """A roofline value: per trial where the probes measured it, else once as arithmetic."""
    if measured:
        ctx.record(metric, value, trial=trial, unit=unit, **labels)
    else:
        ctx.record_analytic(
            metric, value, unit=unit, inputs={"chip": ctx.hardware.get("chip")}, **labels
        )


def _roofline(
    ctx: RunContext, dtype: str, device: RooflineDevice | None
) -> tuple[float, float, str]:
    """(bytes/s, FLOP/s, source): a modeled device's, the chip's spec on an accelerator, else
    this host's probes."""
    if device is not None:
        return device.bytes_per_s, device.flops_per_s, MODELED_SOURCE
    chip = ctx.hardware.get("chip")
    if ctx.hardware["platform"] != "cpu" and chip is not None:
        spec = get_chip(chip)
        return spec.hbm_bytes_per_s, spec.peak_flops_per_s("bf16"), f"{spec.label} spec"
    return stream_bytes_per_s(), matmul_flops_per_s(dtype=dtype), MEASURED_SOURCE


def run(ctx: RunContext) -> None:
    """Record step_over_roofline and mfu_pct per trial, with each batch's step, roofline,
    ratio and MFU beside them and the probes' bandwidth and FLOP/s."""
    params = ctx.merged(DEFAULT_PARAMS)
    _check(params)
    prompt_len, output_len = params["prompt_len"], params["output_len"]
    counterfactual = counterfactuals.chosen(params, ("one-bucket", "attained-peak"))
    device = RooflineDevice.from_param(params["device"])
    options = engines(params, read_config(ctx.model_path), ctx.dtype).settings[""]
    engine = ctx.engine(precompile=True, **options)
    if counterfactual == "one-bucket":
        budget = engine.config.scheduler.max_num_batched_tokens
        del engine  # its KV pool goes before the one-bucket engine's
        engine = ctx.engine(precompile=True, token_buckets=(budget,), **options)
    config = engine.config
    if prompt_len + output_len > config.scheduler.max_model_len:
        raise ValueError(
            f"prompt_len + output_len = {prompt_len + output_len} exceeds "
            f"max_model_len={config.scheduler.max_model_len}"
        )
    model = shape_from_config("served", engine.model_cfg)
    weight_bpp = weight_storage_bytes(config.model.weights, config.model.dtype)
    kv_bpe = np.dtype(resolve_kv_dtype(config.cache.kv_dtype, config.model.dtype)).itemsize
    law = step_law(device, model, weight_bpp, kv_bpe) if device else None
    with slow_device(engine, law) if law else nullcontext():
        _trials(ctx, engine, params, counterfactual, device, model, weight_bpp, kv_bpe)


def _trials(
    ctx: RunContext,
    engine: LLMEngine,
    params: dict[str, Any],
    counterfactual: str,
    device: RooflineDevice | None,
    model: ModelShape,
    weight_bpp: int,
    kv_bpe: int,
) -> None:
    """Every trial of the run on ``engine`` (see run)."""
    batches, prompt_len, output_len = params["batches"], params["prompt_len"], params["output_len"]
    max_batch = max(batches)
    config = engine.config
    vocab = engine.model_cfg.vocab_size
    # Warm every batch size's host path untimed (the steps are precompiled).
    warm = np.random.default_rng([ctx.seed, 1]).integers(3, vocab, size=(max_batch, prompt_len))
    for batch in batches:
        reset_with(engine)
        decode_steps_s(engine, warm[:batch].tolist(), 3)
    for trial in range(ctx.trials):
        bandwidth, peak_flops, source = _roofline(ctx, config.model.dtype, device)
        # A chip's spec is arithmetic input, stored once; a CPU's probes are measured each trial.
        measured = source == MEASURED_SOURCE
        if measured or trial == 0:
            _context(ctx, "roofline_bytes_per_s", bandwidth, "B/s", trial, measured, source=source)
            _context(
                ctx, "roofline_flops_per_s", peak_flops, "FLOP/s", trial, measured, source=source
            )
        rng = np.random.default_rng(ctx.seed + trial)
        ratios: list[float] = []
        mfus: list[float] = []
        rates: dict[int, np.ndarray] = {}  # per batch: each full-batch decode step's FLOP/s
        for batch in batches:
            reset_with(engine)
            prompts = rng.integers(3, vocab, size=(batch, prompt_len)).tolist()
            steps_s = decode_steps_s(engine, prompts, output_len)
            if len(steps_s) == 0:
                raise RuntimeError(f"batch {batch}: no full-batch decode step ran")
            ctx.save_frames(steps=engine.steps_frame(), trial=trial, batch=batch)
            contexts = prompt_len + 1 + np.arange(len(steps_s))
            ideal = [
                decode_bytes(
                    model,
                    batch=batch,
                    context=int(c),
                    weight_bytes_per_param=weight_bpp,
                    kv_bytes_per_element=kv_bpe,
                )
                for c in contexts
            ]
            roofline_s = np.array([d.total_bytes for d in ideal]) / bandwidth
            flops = np.array([d.flops for d in ideal])
            step_s = float(np.median(steps_s))
            ratio = float(np.median(steps_s / roofline_s))
            rates[batch] = flops / steps_s
            ratios.append(ratio)
            ctx.record("decode_step_s", step_s, trial=trial, unit="s", batch=batch)
            if measured or trial == 0:
                roof = float(np.median(roofline_s))
                _context(ctx, "roofline_step_s", roof, "s", trial, measured, batch=batch)
            ctx.record("step_over_roofline_at", ratio, trial=trial, unit="x", batch=batch)
        if counterfactual == "attained-peak":
            peak_flops = max(float(r.max()) for r in rates.values())
            ctx.record("attained_flops_per_s", peak_flops, trial=trial, unit="FLOP/s")
        for batch, rate in rates.items():
            mfu = float(100.0 * np.median(rate) / peak_flops)
            mfus.append(mfu)
            ctx.record("mfu_pct_at", mfu, trial=trial, unit="%", batch=batch)
        ctx.record("step_over_roofline", max(ratios), trial=trial, unit="x")
        ctx.record("mfu_pct", max(mfus), trial=trial, unit="%")
