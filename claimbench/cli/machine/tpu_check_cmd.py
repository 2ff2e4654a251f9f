"""`claimbench tpu-check`: compile the engine step for a TPU chip on this host (libtpu AOT)."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer
from rich.table import Table

from claimbench.cli.common import console, fail, global_options
from claimbench.cli.project import open_claims
from claimbench.engine.config import KV_DTYPES, WEIGHT_FORMATS
from claimbench.hardware.chips import get_chip
from claimbench.harness.claims import find_claim
from claimbench.models.config import ModelConfig
from claimbench.tpucheck.claims import ClaimCheck, ResidentGroup, check_claims, resident_groups
from claimbench.tpucheck.setup import check_setup
from claimbench.tpucompile import check as tpu_check

TpuChip = StrEnum("TpuChip", {name: name for name in tpu_check.TPU_CHIPS})
Profile = StrEnum("Profile", {name: name for name in tpu_check.PROFILES})
Weights = StrEnum("Weights", {name: name for name in WEIGHT_FORMATS})
KvDtype = StrEnum("KvDtype", {name: name for name in KV_DTYPES})


def tpu_check_command(
    ctx: typer.Context,
    chip: Annotated[TpuChip, typer.Option(help="TPU generation to compile for.")],
    profile: Annotated[
        Profile,
        typer.Option(
            help="quick: the shipped model; full: the full profile's 8B-class model "
            "(claims.yaml full_profile.model.preset, as shapes only)."
        ),
    ] = Profile.quick,
    model: Annotated[
        str | None,
        typer.Option(
            help="Check this model instead of the profile's: claimbench-tiny, "
            "claimbench-tiny-moe, a preset name or a local HF directory (config.json only)."
        ),
    ] = None,
    tp: Annotated[
        int,
        typer.Option(
            help="Tensor-parallel chips of the chip's 2x2 slice: the sharded step, sizes per chip."
        ),
    ] = 1,
    buckets: Annotated[
        str | None,
        typer.Option(help="Only these (tokens x sequences) buckets, e.g. 16x8,512x32."),
    ] = None,
    weights: Annotated[Weights, typer.Option(help="Weight format.")] = Weights.bf16,
    kv_dtype: Annotated[KvDtype, typer.Option(help="KV page dtype.")] = KvDtype.auto,
    claims: Annotated[
        str | None,
        typer.Option(
            help="Instead of every bucket of one engine: each engine these claims' experiments "
            "build at --profile (all, or ID,ID), compiled at its largest bucket."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Compile the engine's whole step (Pallas attention) for a TPU chip without one, on one
    chip or split over --tp chips: per bucket, compile time, one chip's HBM needed against
    its capacity, full-KV-cache copies, collectives and bytes accessed over ideal. Exits 1
    if any bucket fails to compile, to fit, or copies the cache."""
    try:
        if claims is not None and (buckets or tp != 1):
            raise ValueError(
                "--claims compiles each claim's own tp at its largest bucket: "
                "drop --tp and --buckets"
            )
        setup = check_setup(
            global_options(ctx).root,
            profile.value,
            model=model,
            tp=tp,
            buckets=buckets,
            weights=weights.value,
            kv_dtype=kv_dtype.value,
        )
    except ValueError as err:
        fail(str(err))
    if (reason := tpu_check.libtpu_unavailable()) is not None:
        fail(reason)
    if claims is not None:
        _check_claims(
            ctx, claims, profile.value, chip.value, setup.model_name, setup.model_cfg, as_json
        )
        return
    report = tpu_check.check(
        chip.value,
        setup.model_cfg,
        setup.engine_cfg,
        model_name=setup.model_name,
        buckets=setup.buckets,
    )
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        _print(report)
    if not report.ok:
        raise typer.Exit(1)


def _check_claims(
    ctx: typer.Context,
    ids: str,
    profile: str,
    chip: str,
    model_name: str,
    model_cfg: ModelConfig,
    as_json: bool,
) -> None:
    root = global_options(ctx).root
    every = open_claims(root)
    try:
        chosen = every if ids == "all" else [find_claim(every, i.strip()) for i in ids.split(",")]
    except ValueError as err:
        fail(str(err))
    checks = check_claims(root, chosen, profile, chip, model_name=model_name, model_cfg=model_cfg)
    groups = resident_groups(checks, int(get_chip(chip).hbm_bytes))
    if as_json:
        rows = {
            "engines": [c.to_json() for c in checks],
            "held_at_once": [g.to_json() for g in groups],
        }
        print(json.dumps(rows, indent=2))
    else:
        _print_claims(checks, chip, profile)
        _print_groups(groups, chip)
    if not all(c.ok for c in checks) or not all(g.ok for g in groups):
        raise typer.Exit(1)


def _print_claims(checks: list[ClaimCheck], chip: str, profile: str) -> None:
    table = Table(title=f"Each claim's engines ({profile} profile) on {chip}, largest bucket")
    for name in (
        "claim",
        "setting",
        "model",
        "tp",
        "bucket",
        "compile s",
        "KV pool GB",
        "HBM GB per chip",
    ):
        table.add_column(name, justify="left" if name in ("claim", "setting", "model") else "right")
    table.add_column("result")
    for c in checks:
        b = c.bucket
        table.add_row(
            c.claim_id,
            c.setting,
            c.model,
            str(c.tp),
            "-" if b is None else f"{b.num_tokens}x{b.num_seqs}",
            "-" if b is None else f"{b.compile_s + (c.draft.compile_s if c.draft else 0):.1f}",
            _pool_cell(c),
            "-" if b is None else f"{_needed(c) / 1e9:.2f}/{b.hbm_bytes / 1e9:.0f}",
            _result(c),
        )
    console.print(table)


def _pool_cell(c: ClaimCheck) -> str:
    """The pool compiled (with "fit" when sized from the chip's HBM, "+ draft" for the
    draft model's own pool)."""
    if c.bucket is None:
        return "-" if c.pool is None else f"{c.pool.pool_bytes / 1e9:.2f} fit"
    cell = f"{c.bucket.kv_pool_bytes / 1e9:.2f}"
    if c.pool is not None:
        cell += " fit"
    if c.draft is not None:
        cell += f" + {c.draft.kv_pool_bytes / 1e9:.2f} draft"
    return cell


def _needed(c: ClaimCheck) -> int:
    """One engine's HBM: its step's, and its draft step's arguments on top."""
    return c.resident_bytes + c.temp_bytes


def _result(c: ClaimCheck) -> str:
    if not c.ok:
        return c.error or ""
    return "ok" if c.pool is None else f"ok: {c.pool.describe()}"


def _print_groups(groups: list[ResidentGroup], chip: str) -> None:
    if not groups:
        return
    table = Table(title=f"Engines an experiment holds at once, summed, on {chip}")
    for name in ("claim", "settings", "resident GB", "temporaries GB", "HBM GB per chip"):
        table.add_column(name, justify="left" if name in ("claim", "settings") else "right")
    table.add_column("result")
    for g in groups:
        table.add_row(
            g.claim_id,
            ", ".join(g.settings),
            f"{g.resident_bytes / 1e9:.2f}",
            f"{g.temp_bytes / 1e9:.2f}",
            f"{g.total_bytes / 1e9:.2f}/{g.hbm_bytes / 1e9:.0f}",
            "ok" if g.ok else g.error,
        )
    console.print(table)


def _print(report: tpu_check.CheckReport) -> None:
    chips = f"{report.chip}" if report.tp == 1 else f"{report.tp}x {report.chip} (per chip)"
    table = Table(
        title=f"{report.model} on {chips}: {report.weights} weights, "
        f"{report.kv_dtype} KV, {report.num_pages} pages"
    )
    columns = ("tokens", "seqs", "compile s", "HBM GB", "temp MB", "copies", "collectives")
    for name in (*columns, "bytes/ideal"):
        table.add_column(name, justify="right")
    table.add_column("result")
    for b in report.buckets:
        table.add_row(
            str(b.num_tokens),
            str(b.num_seqs),
            f"{b.compile_s:.1f}",
            f"{b.total_bytes / 1e9:.2f}/{b.hbm_bytes / 1e9:.0f}",
            f"{b.temp_bytes / 1e6:.1f}",
            str(b.full_cache_copies),
            _collectives(b.collectives),
            f"{b.bytes_over_ideal:.2f}",
            "ok" if b.ok else b.error,
        )
    console.print(table)


def _collectives(found: dict[str, dict[str, int]]) -> str:
    """{"all-reduce": {"count": 65, "bytes": 6422880}} -> "all-reduce 65 (6.4 MB)"."""
    parts = [f"{op} {c['count']} ({c['bytes'] / 1e6:.1f} MB)" for op, c in sorted(found.items())]
    return ", ".join(parts) or "-"
