"""`claimbench env` (the platform and its chip spec) and `claimbench roofline` (the cost model)."""

from __future__ import annotations

import dataclasses
import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from claimbench.cli.common import console, fail, global_options
from claimbench.hardware.chips import CHIPS, COMPUTE_DTYPES, ChipSpec, detect, get_chip
from claimbench.hardware.model_presets import (
    PRESET_NAMES,
    ModelShape,
    get_preset,
    shape_from_config,
)
from claimbench.hardware.roofline import (
    BYTES_PER_ELEMENT,
    DEFAULT_HBM_RESERVE,
    ServingSetup,
    estimate,
)
from claimbench.models.provenance import ModelDirError, read_model_config

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
DEFAULT_PRESET = "llama-3.1-8b"
# Choices from the tables they index, so --help lists exactly what is known.
Chip = StrEnum("Chip", {name: name for name in CHIPS})
StorageDtype = StrEnum("StorageDtype", {name: name for name in BYTES_PER_ELEMENT})
ComputeDtype = StrEnum("ComputeDtype", {name: name for name in COMPUTE_DTYPES})


def _number(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value / scale:,.{digits}f}"


def _percent(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100 * fraction:.1f} %"


def _spec_rows(spec: ChipSpec) -> list[tuple[str, str]]:
    return [
        ("chip spec", spec.label),
        ("HBM per chip (GB)", _number(spec.hbm_bytes, 1e9)),
        ("HBM bandwidth per chip (GB/s)", _number(spec.hbm_bytes_per_s, 1e9, 0)),
        ("bf16 peak (TFLOP/s)", _number(spec.bf16_flops_per_s, 1e12)),
        ("int8 peak (TOP/s)", _number(spec.int8_ops_per_s, 1e12)),
        ("fp8 peak (TFLOP/s)", _number(spec.fp8_flops_per_s, 1e12)),
        ("ICI per chip, bidirectional (GB/s)", _number(spec.ici_bytes_per_s, 1e9, 0)),
        ("on-demand $/chip-hour", _number(spec.price_per_chip_hour, digits=2)),
    ]


def _print_table(title: str, rows: list[tuple[str, str]]) -> None:
    table = Table(title=title, show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)


def env(json_output: JsonFlag = False) -> None:
    """Show the platform JAX runs on, its devices, the chip's spec and the library versions."""
    info = detect()
    info["attention_backend"] = _attention_backend()
    spec = get_chip(info["chip"]) if info["chip"] else None
    if json_output:
        chip_spec = dataclasses.asdict(spec) if spec else None
        typer.echo(json.dumps({**info, "chip_spec": chip_spec}, indent=2))
        return
    rows = [
        (key.replace("_", " "), "-" if value is None else str(value)) for key, value in info.items()
    ]
    _print_table("claimbench env", rows + (_spec_rows(spec) if spec else []))


def _attention_backend() -> str:
    """What an engine attends with by default here, and on CPU why not natively if not."""
    import jax

    from claimbench.kernels.backend import resolve_backend_name

    name = resolve_backend_name("auto")
    if name == "xla" and jax.default_backend() == "cpu":
        from claimbench.kernels.native_attention import unavailable_reason

        return f"xla (native kernels unavailable: {unavailable_reason()})"
    return name


def _model_shape(ctx: typer.Context, model: str | None) -> tuple[str, ModelShape]:
    """The shape roofline models, and its label: roofline's --model (a preset name or a model
    directory), else the global --model directory, else DEFAULT_PRESET. Exits 2 if unusable."""
    global_model = global_options(ctx).model
    if model is not None and global_model is not None:
        fail(f"give the model once: roofline --model {model} or the global --model {global_model}")
    if model is None:
        model = str(global_model) if global_model is not None else DEFAULT_PRESET
    if model in PRESET_NAMES:
        return model, get_preset(model)
    path = Path(model)
    if not path.is_dir():
        fail(
            f"--model {model!r} is neither a preset ({', '.join(PRESET_NAMES)}) "
            "nor a model directory"
        )
    try:
        config = read_model_config(path)
    except ModelDirError as err:
        fail(f"--model: {err}")
    name = path.resolve().name
    return name, shape_from_config(name, config)


def _estimate_rows(est: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        ("step time (ms)", _number(est["step_s"], 1e-3, 2)),
        ("  KV load (ms)", _number(est["kv_load_s"], 1e-3, 2)),
        ("  weight load (ms)", _number(est["weight_load_s"], 1e-3, 2)),
        ("  matmul compute (ms)", _number(est["compute_s"], 1e-3, 2)),
        ("  ICI all-reduce (ms)", _number(est["ici_s"], 1e-3, 2)),
        ("bound", est["bound"]),
        ("tokens/s", _number(est["tokens_per_s"])),
        ("tokens/s per chip", _number(est["tokens_per_s_per_chip"])),
        ("bytes per step (GB)", _number(est["bytes_per_step"], 1e9, 2)),
        ("KV per token (kB)", _number(est["kv_bytes_per_token"], 1e3, 1)),
        ("KV for the batch (GB)", _number(est["kv_bytes"], 1e9, 2)),
        ("weights (GB)", _number(est["weight_bytes"], 1e9, 2)),
        ("critical batch", _number(est["critical_batch"])),
        ("max batch in HBM", str(est["max_batch"])),
        ("batch fits", "yes" if est["fits"] else "no"),
        ("MFU", _percent(est["mfu"])),
        ("MFU at max batch", _percent(est["mfu_at_max_batch"])),
        ("prefill of one context (ms)", _number(est["prefill_s"], 1e-3, 1)),
        ("$ per million tokens", _number(est["usd_per_million_tokens"], digits=3)),
    ]


def roofline(
    ctx: typer.Context,
    model: Annotated[
        str | None,
        typer.Option(
            metavar="PRESET|DIR",
            help=f"A preset ({', '.join(PRESET_NAMES)}) or a Hugging Face model directory, "
            f"whose config.json gives the shape (default: the global --model, else "
            f"{DEFAULT_PRESET}).",
        ),
    ] = None,
    chip: Annotated[Chip, typer.Option(help="Chip spec.")] = Chip.v5e,
    chips: Annotated[int, typer.Option(help="Chips the model is tensor-parallel over.")] = 1,
    batch: Annotated[int, typer.Option(help="Sequences decoded per step.")] = 32,
    context: Annotated[int, typer.Option(help="Cached tokens per sequence.")] = 4096,
    weights: Annotated[
        StorageDtype, typer.Option(help="Weight storage dtype.")
    ] = StorageDtype.bf16,
    kv: Annotated[StorageDtype, typer.Option(help="KV cache dtype.")] = StorageDtype.bf16,
    compute: Annotated[ComputeDtype, typer.Option(help="Matmul dtype.")] = ComputeDtype.bf16,
    ici: Annotated[bool, typer.Option(help="Add the per-layer ICI all-reduce time.")] = False,
    reserve: Annotated[
        float, typer.Option(help="Fraction of HBM held back from weights and KV.")
    ] = DEFAULT_HBM_RESERVE,
    json_output: JsonFlag = False,
) -> None:
    """Estimate decode step time, throughput, capacity and MFU from the chip spec table."""
    chip, weights, kv, compute = chip.value, weights.value, kv.value, compute.value
    for flag, value in (("--chips", chips), ("--batch", batch), ("--context", context)):
        if value <= 0:
            fail(f"{flag} must be > 0, got {value}")
    if not 0.0 <= reserve < 1.0:
        fail(f"--reserve must be in [0, 1), got {reserve}")
    model, shape = _model_shape(ctx, model)
    try:
        setup = ServingSetup(
            model=shape,
            chip=get_chip(chip),
            num_chips=chips,
            batch=batch,
            context=context,
            weight_dtype=weights,
            kv_dtype=kv,
            compute_dtype=compute,
            include_ici=ici,
            hbm_reserve_fraction=reserve,
        )
    except ValueError as err:
        fail(str(err))
    est = estimate(setup).to_dict()
    inputs = {
        "model": model,
        "chip": chip,
        "chips": chips,
        "batch": batch,
        "context": context,
        "weights": weights,
        "kv": kv,
        "compute": compute,
        "ici": ici,
        "reserve": reserve,
    }
    if json_output:
        typer.echo(json.dumps({"inputs": inputs, "estimate": est}, indent=2))
        return
    title = (
        f"{model} on {chips} x {chip}: batch {batch}, context {context}, "
        f"weights {weights}, KV {kv}, math {compute}"
    )
    _print_table(title, _estimate_rows(est))
