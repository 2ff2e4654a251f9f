"""The claimbench command line: one module per command group, joined here."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from claimbench.cli.common import GlobalOptions, fail

app = typer.Typer(
    help="Run an LLM-serving design's falsifiable claims as experiments, score them, publish.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

DTYPES = ("bfloat16", "float32")


@app.callback()
def main(
    ctx: typer.Context,
    root: Annotated[
        Path, typer.Option(help="Claims project directory (claims.yaml, experiments/, results/).")
    ] = Path("."),
    model: Annotated[
        Path | None,
        typer.Option(help="Local Hugging Face model directory (default: shipped claimbench-tiny)."),
    ] = None,
    dtype: Annotated[str, typer.Option(help="Model compute dtype: bfloat16 or float32.")] = (
        "bfloat16"
    ),
) -> None:
    """claimbench: claims -> experiments -> Parquet results -> scores -> scoreboard."""
    if dtype not in DTYPES:
        fail(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if not root.is_dir():
        fail(f"--root {root} is not a directory")
    ctx.obj = GlobalOptions(root=root.resolve(), model=model, dtype=dtype)


# Command groups register below, one line each (keep this block append-only).
from claimbench.cli import hardware_cmd  # noqa: E402

app.command("env")(hardware_cmd.env)
app.command("roofline")(hardware_cmd.roofline)
from claimbench.cli import claims_cmd, run_cmd, score_cmd, site_cmd  # noqa: E402

app.command("list")(claims_cmd.list_claims)
app.command("show")(claims_cmd.show_claim)
app.command("run")(run_cmd.run)
app.command("score")(score_cmd.score)
app.command("site")(site_cmd.site)
from claimbench.cli import model_cmd  # noqa: E402

app.add_typer(model_cmd.app, name="model")
from claimbench.cli import bench_cmd, generate_cmd  # noqa: E402

app.command("generate")(generate_cmd.generate)
app.command("bench")(bench_cmd.bench)
