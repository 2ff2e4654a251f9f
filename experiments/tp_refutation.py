"""tp-refutation: what tensor parallelism buys in decode, per token and per chip.

Measured, per trial: one engine per tp in ``tps`` (engine/worker/sharding.py: weights split
Megatron-style, the KV pool over KV heads, attention under shard_map) serves the same batch
of ``batch`` requests, all admitted at once, ``prompt_len`` tokens each, ``output_len``
greedy tokens (EOS ignored). Per-token decode latency is the median TPOT over the batch
(every decode step emits one token for each sequence), so decode throughput is
batch / TPOT and per-chip throughput batch / (TPOT * tp). Against tp = 1 at the largest tp:

* latency_ratio = TPOT(tp=1) / TPOT(tp=max);
* per_chip_throughput_ratio = per-chip throughput(tp=max) / per-chip throughput(tp=1).

On a CPU host the tp devices are virtual (cli/cpu_devices.py): they share the host's cores
and memory and have no interconnect, so these numbers exercise the sharded path and are
indicative only; the claim is about TPU chips.

Analytic context, once per chip of ``roofline_chips``: the roofline with its ICI all-reduce
term (hardware/roofline.py) for ``model`` at ``roofline_tp`` chips, ``batch`` sequences at
``roofline_context`` cached tokens: roofline_latency_ratio and
roofline_per_chip_throughput_ratio. No condition reads them; they say what the hardware
physics predicts beside whatever was measured.

Counterfactual (``counterfactual``, lab/engines/counterfactuals.py): ``tp-off`` builds every arm's
engine unsharded (tp = 1) while keeping its tp label, so the larger tp's arm gets no more
devices and its latency cannot fall. ``one-chip-slow``: the tp = 1 arm's device takes
``ONE_CHIP_SLOW_S`` per step (lab/engines/slow_device.py), far more than a sharded tiny step, as if
one chip alone ran far below the chips tp shards over (a chip whose weights do not fit its
fast memory, say); the larger tp's arm is unchanged. Per-chip throughput at tp = max then
exceeds tp = 1's by far, so per_chip_throughput_ratio can land above 1.1: the ratio reads
the arms' real TPOTs, and only a device that makes the single chip slower moves it there.

Param ``device`` ({}: the real devices): ``{bytes_per_s, flops_per_s}`` runs every arm on
devices of known physics (lab/engines/roofline_device.py): each step takes its roofline time on
that bandwidth and peak, split evenly over the arm's engine's real tp (an ideal interconnect).
On a CPU's virtual devices, which share two cores, the sharded arm is slower, so the registered
run can land on one side only; on the modeled devices the tests show latency_ratio reads either
side (near tp when sharded, 1 under tp-off).

Params: tps, batch, prompt_len, output_len, model, roofline_chips, roofline_tp,
roofline_context, ``engine``, ``device``, counterfactual.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from claimbench.engine.kv.kv_cache import resolve_kv_dtype
from claimbench.engine.sampling_params import SamplingParams
from claimbench.hardware.chips import get_chip
from claimbench.hardware.decode_roofline import weight_storage_bytes
from claimbench.hardware.model_presets import get_preset, shape_from_config
from claimbench.hardware.roofline import ServingSetup, decode_step
from claimbench.lab.engines import counterfactuals
from claimbench.lab.engines.engine_settings import EngineSettings
from claimbench.lab.engines.roofline_device import RooflineDevice, step_law
from claimbench.lab.engines.slow_device import slow_device

if TYPE_CHECKING:
    from collections.abc import Callable

    from claimbench.engine.engine import LLMEngine
    from claimbench.engine.worker.batch import StepInputs
    from claimbench.harness.context import RunContext
    from claimbench.models.config import ModelConfig

DEFAULT_PARAMS: dict[str, Any] = {
    "tps": [1, 2, 4],
    "batch": 8,
    "prompt_len": 32,
    "output_len": 32,
    "model": "llama-3.1-8b",
    "roofline_chips": ["v5e", "v6e"],
    "roofline_tp": 4,
    "roofline_context": 4096,
    "engine": {},
    "device": {},  # {}: the real devices; {bytes_per_s, flops_per_s}: modeled ones
    "counterfactual": counterfactuals.NONE,
}
COUNTERFACTUALS = ("tp-off", "one-chip-slow")
ONE_CHIP_SLOW_S = 0.2  # one-chip-slow's tp = 1 device step: tens of times a tiny CPU step


def record_roofline(ctx: RunContext, params: dict[str, Any]) -> None:
    """The roofline-and-ICI prediction of both ratios, once per chip (analytic context)."""
    shape, tp = get_preset(params["model"]), params["roofline_tp"]
    for chip_name in params["roofline_chips"]:
        chip = get_chip(chip_name)
        steps = {
            n: decode_step(
                ServingSetup(
                    shape,
                    chip,
                    num_chips=n,
                    batch=params["batch"],
                    context=params["roofline_context"],
                    include_ici=True,
                )
            )
            for n in (1, tp)
        }
        one, many = steps[1].step_s, steps[tp].step_s
        inputs = {
            "layout": asdict(shape),
            "chip": chip_name,
            "tp": tp,
            "batch": params["batch"],
            "context": params["roofline_context"],
            "step_s_1": one,
            f"step_s_{tp}": many,
            f"ici_s_{tp}": steps[tp].ici_s,
        }
        labels = {"chip": chip_name, "model": params["model"], "tp": tp}
        ctx.record_analytic("roofline_latency_ratio", one / many, unit="x", inputs=inputs, **labels)
        ctx.record_analytic(
            "roofline_per_chip_throughput_ratio",
            one / (tp * many),
            unit="x",
            inputs=inputs,
            **labels,
        )


def decode_tpot_s(engine: LLMEngine, prompts: list[list[int]], output_len: int) -> float:
    """Serve the batch (all at once, from a reset engine); the median TPOT in seconds."""
    engine.reset()
    sampling = SamplingParams(max_tokens=output_len, ignore_eos=True)
    engine.generate(prompts, sampling)
    return float(np.median(engine.requests_frame()["tpot_s"]))


def engines(params: dict[str, Any], model: ModelConfig | None, dtype: str) -> EngineSettings:
    """One engine per tensor-parallel degree in ``tps`` (each once, smallest first), all held
    at once."""
    return EngineSettings({f"tp={tp}": {"tp": tp} for tp in sorted(set(params["tps"]))})


def _modeled(device: RooflineDevice, engine: LLMEngine) -> Callable[[StepInputs], float]:
    """The step law of ``engine`` on modeled devices: split over its real tp."""
    config = engine.config
    model = shape_from_config("served", engine.model_cfg)
    weight_bpp = weight_storage_bytes(config.model.weights, config.model.dtype)
    kv_bpe = np.dtype(resolve_kv_dtype(config.cache.kv_dtype, config.model.dtype)).itemsize
    return step_law(device, model, weight_bpp, kv_bpe, shards=config.parallel.tp)


def run(ctx: RunContext) -> None:
    """Both ratios per trial (measured), per-tp TPOT and throughput beside; the roofline's
    ratios once per chip (analytic)."""
    params = ctx.merged(DEFAULT_PARAMS)
    tps = sorted(set(params["tps"]))
    if tps[0] != 1 or len(tps) < 2:
        raise ValueError(f"param tps must include 1 and a larger tp, got {params['tps']}")
    if params["output_len"] < 2:
        raise ValueError(f"param output_len must be >= 2 (TPOT), got {params['output_len']}")
    device = RooflineDevice.from_param(params["device"])
    record_roofline(ctx, params)
    batch, top = params["batch"], tps[-1]
    settings = engines(params, None, ctx.dtype).settings.values()
    counterfactual = counterfactuals.chosen(params, COUNTERFACTUALS)
    if counterfactual == "tp-off":
        built = {options["tp"]: ctx.engine(precompile=True, tp=1) for options in settings}
    else:
        built = {options["tp"]: ctx.engine(precompile=True, **options) for options in settings}
    laws = {tp: _modeled(device, engine) if device else None for tp, engine in built.items()}
    rng = np.random.default_rng(ctx.seed)
    vocab = built[1].model_cfg.vocab_size
    for trial in range(ctx.trials):
        prompts = rng.integers(2, vocab, (batch, params["prompt_len"])).tolist()
        tpot = {}
        for tp, engine in built.items():
            slow = counterfactual == "one-chip-slow" and tp == 1
            law = ONE_CHIP_SLOW_S if slow else laws[tp]
            with slow_device(engine, law) if law else nullcontext():
                tpot[tp] = decode_tpot_s(engine, prompts, params["output_len"])
            ctx.save_frames(engine.requests_frame(), engine.steps_frame(), tp=tp, trial=trial)
        for tp, seconds in tpot.items():
            ctx.record("decode_tpot_ms", 1000 * seconds, trial=trial, unit="ms", tp=tp)
            ctx.record(
                "per_chip_tokens_per_s", batch / (seconds * tp), trial=trial, unit="tok/s", tp=tp
            )
        ctx.record("latency_ratio", tpot[1] / tpot[top], trial=trial, unit="x", tp=top)
        ctx.record(
            "per_chip_throughput_ratio",
            tpot[1] / (top * tpot[top]),
            trial=trial,
            unit="x",
            tp=top,
        )


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """Per-token decode latency and per-chip throughput against tp (newest run with them; a
    dot per trial, the line through the trials' means)."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    from claimbench.lab.figures.svg import figure_to_svg

    for run_dir in reversed(run_dirs):
        path = Path(run_dir) / "measurements.parquet"
        if path.is_file():
            rows = pd.read_parquet(path)
            rows = rows[rows["metric"].isin(["decode_tpot_ms", "per_chip_tokens_per_s"])]
            if len(rows):
                break
    else:
        return []
    rows = rows.assign(tp=[json.loads(x)["tp"] for x in rows["labels"]])
    panels = (
        ("decode_tpot_ms", "per-token decode latency (ms)"),
        ("per_chip_tokens_per_s", "decode tokens/s per chip"),
    )
    with rc_context({"svg.fonttype": "none", "font.size": 9}):
        fig = Figure(figsize=(7.0, 3.2))
        for i, (metric, label) in enumerate(panels):
            ax = fig.add_subplot(1, 2, i + 1)
            mine = rows[rows["metric"] == metric]
            ax.scatter(mine["tp"], mine["value"], s=10, color="#2166ac", alpha=0.4)
            mean = mine.groupby("tp")["value"].mean()
            ax.plot(mean.index, mean.values, color="#2166ac", marker="o")
            ax.set_xticks(sorted(mine["tp"].unique()))
            ax.set_xlabel("tensor-parallel devices")
            ax.set_ylabel(label)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        fig.tight_layout()
        svg = figure_to_svg(fig)
    return [("Decode latency and per-chip throughput against tp (measured)", svg)]
