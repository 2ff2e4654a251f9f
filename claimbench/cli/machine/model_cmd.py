"""`claimbench model ...`: train the shipped models, describe a model, fetch a checkpoint."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from claimbench.cli.common import console, fail, global_options

app = typer.Typer(help="Train the shipped models; print a model's size and held-out quality.")


class Which(StrEnum):
    target = "target"
    draft = "draft"
    both = "both"


@app.command()
def train(
    out: Annotated[
        Path | None, typer.Option(help="Assets directory (default: the package's models/assets).")
    ] = None,
    steps: Annotated[int, typer.Option(help="Optimizer steps for the target model.")] = 1000,
    draft_steps: Annotated[int, typer.Option(help="Optimizer steps for the draft model.")] = 500,
    which: Annotated[
        Which, typer.Option(help="target / both train a new tokenizer; draft reuses it.")
    ] = Which.both,
    seed: Annotated[int, typer.Option(help="Seed for init and batch order.")] = 0,
) -> None:
    """Train claimbench-tiny and its draft on this interpreter's stdlib source (HF format)."""
    from claimbench.models.checkpoint import ASSETS_DIR
    from claimbench.training.train import train_shipped

    if steps <= 0 or draft_steps <= 0:
        fail(f"--steps and --draft-steps must be > 0, got {steps}, {draft_steps}")
    out_dir = ASSETS_DIR if out is None else out
    if which == Which.draft and not (out_dir / "claimbench-tiny" / "tokenizer.json").is_file():
        fail(f"--which draft needs the target's tokenizer in {out_dir / 'claimbench-tiny'}")
    train_shipped(
        out_dir,
        which=which.value,
        target_steps=steps,
        draft_steps=draft_steps,
        seed=seed,
        console=console,
    )


@app.command("train-moe")
def train_moe(
    out: Annotated[
        Path | None, typer.Option(help="Assets directory (default: the package's models/assets).")
    ] = None,
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 200,
    seed: Annotated[int, typer.Option(help="Seed for the router, upcycling noise, batches.")] = 0,
) -> None:
    """Train claimbench-tiny-moe (8 experts, top-2) from claimbench-tiny by sparse upcycling."""
    from claimbench.models.checkpoint import ASSETS_DIR
    from claimbench.training.moe_train import train_shipped_moe

    if steps <= 0:
        fail(f"--steps must be > 0, got {steps}")
    out_dir = ASSETS_DIR if out is None else out
    if not (out_dir / "claimbench-tiny" / "model.safetensors").is_file():
        fail(f"train-moe needs claimbench-tiny (model and tokenizer) in {out_dir}")
    train_shipped_moe(out_dir, steps=steps, seed=seed, console=console)


@app.command("train-exits")
def train_exits(
    model: Annotated[
        Path | None, typer.Option(help="Model directory (default: the shipped claimbench-tiny).")
    ] = None,
    steps: Annotated[int, typer.Option(help="Distillation steps.")] = 150,
    threshold: Annotated[
        float | None,
        typer.Option(
            help="Confidence threshold saved with the heads (default: the lowest of a sweep "
            "keeping 99% held-out top-1 agreement)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for the batch order.")] = 0,
) -> None:
    """Distill exit heads on every intermediate layer; save them beside the model."""
    from claimbench.models.checkpoint import default_model_path
    from claimbench.training.exit_train import train_exits as distill_exits

    model_dir = default_model_path() if model is None else model
    if steps <= 0 or (threshold is not None and not 0 <= threshold <= 1):
        fail(f"--steps must be > 0 and --threshold in [0, 1], got {steps}, {threshold}")
    if not (model_dir / "tokenizer.json").is_file():
        fail(f"train-exits needs a model and its tokenizer in {model_dir}")
    distill_exits(model_dir, steps=steps, threshold=threshold, seed=seed, console=console)


@app.command()
def info(
    ctx: typer.Context,
    model: Annotated[
        Path | None,
        typer.Option(help="Model directory (default: --model, else both shipped models)."),
    ] = None,
    windows: Annotated[int, typer.Option(help="Held-out windows of 256 tokens to score.")] = 64,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Parameters, weight bytes and held-out loss / perplexity per token and per byte."""
    from rich import box
    from rich.table import Table

    from claimbench.models.checkpoint import ModelLoadError, default_draft_path
    from claimbench.models.checkpoint import default_model_path as default_path
    from claimbench.training.describe import describe_model

    if windows <= 0:
        fail(f"--windows must be > 0, got {windows}")
    opts = global_options(ctx)
    chosen = model or opts.model
    paths = [chosen] if chosen is not None else [default_path(), default_draft_path()]
    try:
        rows = [describe_model(p, dtype=opts.dtype, num_windows=windows) for p in paths]
    except (ModelLoadError, FileNotFoundError, ValueError) as e:
        fail(str(e))
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("model", no_wrap=True)
    for header in ("params", "MB", "nats/tok", "ppl/tok", "bits/B", "ppl/B"):
        table.add_column(header, justify="right")
    for r in rows:
        table.add_row(
            r["name"],
            f"{r['params'] / 1e6:.2f}M",
            f"{r['weight_bytes'] / 1e6:.2f}",
            f"{r['loss_per_token']:.3f}",
            f"{r['ppl_per_token']:.2f}",
            f"{r['bits_per_byte']:.3f}",
            f"{r['ppl_per_byte']:.3f}",
        )
    console.print(table)
    console.print(
        f"held-out loss per token (nats) and per byte (B), {rows[0]['num_windows']} windows, "
        f"{rows[0]['num_tokens']:,} tokens"
    )


@app.command()
def fetch(
    ctx: typer.Context,
    repo: Annotated[
        str | None,
        typer.Argument(
            help="owner/name on the Hub (default: claims.yaml full_profile.model; a claim's "
            "draft_model param pins a speculative draft)."
        ),
    ] = None,
    revision: Annotated[
        str | None,
        typer.Option(help="40-hex commit (default: claims.yaml's, for its repo)."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Directory (default: ~/.cache/claimbench/models/<owner--name>/<rev>)."),
    ] = None,
    from_dir: Annotated[
        Path | None,
        typer.Option(help="Copy this local HF-format directory instead of downloading."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the fetch record as JSON (with its path).")
    ] = False,
) -> None:
    """Fetch a checkpoint at a pinned commit (huggingface_hub), check that the engine loads it
    and record every file's sha256 in its fetch.json; an existing fetch is verified instead."""
    from claimbench.cli.claims.budget_cmd import open_project_config
    from claimbench.models.fetch import (
        FetchError,
        copy_from,
        default_dir,
        fetch_model,
        hub_download,
    )

    root = global_options(ctx).root
    pinned = open_project_config(root).full_profile
    if repo is None:
        if pinned is None:
            fail("name a repo, or pin one in claims.yaml full_profile.model")
        repo = pinned.model.repo
    if revision is None:
        revision = _pinned_revision(root, repo)
    target = out if out is not None else default_dir(repo, revision)
    download = copy_from(from_dir) if from_dir is not None else hub_download
    try:
        fetched = fetch_model(repo, revision, target, download=download)
    except FetchError as err:
        fail(str(err))
    if as_json:
        print(json.dumps({"path": str(fetched.path), **fetched.record}, indent=2))
        return
    verb = "fetched" if fetched.downloaded else "verified"
    num_bytes = sum(f["bytes"] for f in fetched.record["files"].values())
    console.print(
        f"{verb} {repo}@{revision[:12]}: {len(fetched.record['files'])} files, "
        f"{num_bytes / 1e9:.2f} GB, sha256 in {fetched.path / 'fetch.json'}",
        highlight=False,
    )
    console.print(str(fetched.path), highlight=False, soft_wrap=True)


def _pinned_revision(root: Path, repo: str) -> str:
    """The commit claims.yaml pins for ``repo``: the full profile's model, or a draft a
    claim's draft_model param names; exit 2 when it pins none."""
    from claimbench.cli.claims.budget_cmd import open_project_config
    from claimbench.cli.project import open_claims
    from claimbench.lab.speculative.draft_models import claim_draft_pins

    pinned = open_project_config(root).full_profile
    pins = [pinned.model] if pinned is not None else []
    pins += claim_draft_pins(open_claims(root))
    for pin in pins:
        if pin.repo == repo:
            return pin.revision
    fail(f"--revision is required for {repo} (claims.yaml pins no revision for it)")
