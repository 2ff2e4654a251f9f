"""The claimbench command line: one module per command group, joined here."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from claimbench.cli.common import GlobalOptions, fail
from claimbench.platform.cpu_devices import set_cpu_device_count
from claimbench.platform.jax_platforms import set_default_jax_platforms

# Before any command imports JAX: off a TPU host, libtpu must not try to start a TPU runtime;
# on a CPU-only host, --tp N needs N virtual devices.
set_default_jax_platforms()
set_cpu_device_count(sys.argv[1:])

# click's UsageError (typer may vendor its own click, so it is found from a public subclass).
_UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


@contextmanager
def _one_line_usage_errors() -> Iterator[None]:
    try:
        yield
    except _UsageError as err:
        # Without its context a usage error prints only "Error: <what is wrong>": the usage text
        # and help hint above it would make a bad choice the one bad input that is not one line.
        # NoArgsIsHelpError prints the help itself and needs its context.
        if type(err).__name__ != "NoArgsIsHelpError":
            err.ctx = None
            if isinstance(getattr(err, "message", None), str):
                err.message = err.message.removeprefix("Value error, ")
        raise


def os_error_line(err: OSError) -> str:
    """An OSError as one line naming the file(s) and the problem."""
    files = [str(f) for f in (err.filename, err.filename2) if f is not None]
    what = err.strerror or str(err)
    return f"{' -> '.join(files)}: {what}" if files else what


class OneLineErrorsGroup(TyperGroup):
    """The app's command group: usage errors (an unknown option, a value outside an option's
    choices, a number that does not parse) print one line and exit 2; so does a file or
    directory a command cannot read or write (an --out under /proc, a store that is a file)."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _one_line_usage_errors():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        try:
            with _one_line_usage_errors():
                return super().invoke(ctx)
        except BrokenPipeError:
            raise  # the reader went away (`| head`): nothing to say to it
        except OSError as err:
            fail(os_error_line(err))


app = typer.Typer(
    cls=OneLineErrorsGroup,
    help="Run an LLM-serving design's falsifiable claims as experiments, score them, publish.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Plain click help: typer's rich help prints a Python type beside every option (<bool> on
    # each flag, <list[str]> on repeatable ones), which reads as noise to a user.
    rich_markup_mode=None,
)


class Dtype(StrEnum):
    """Model compute dtype."""

    bfloat16 = "bfloat16"
    float32 = "float32"


@app.callback()
def main(
    ctx: typer.Context,
    root: Annotated[
        Path, typer.Option(help="Claims project directory (claims.yaml, experiments/, results/).")
    ] = Path("."),
    model: Annotated[
        Path | None,
        typer.Option(
            help="Local Hugging Face model directory the engine serves (default: the shipped "
            "claimbench-tiny). roofline takes its own --model: a preset name or such a directory."
        ),
    ] = None,
    dtype: Annotated[Dtype, typer.Option(help="Model compute dtype.")] = Dtype.bfloat16,
) -> None:
    """claimbench: claims -> experiments -> Parquet results -> scores -> scoreboard."""
    if not root.is_dir():
        fail(f"--root {root} is not a directory")
    ctx.obj = GlobalOptions(root=root.resolve(), model=model, dtype=dtype.value)


# Command groups register below, one line each (keep this block append-only).
from claimbench.cli.machine import hardware_cmd  # noqa: E402

app.command("env")(hardware_cmd.env)
app.command("roofline")(hardware_cmd.roofline)
from claimbench.cli.claims import claims_cmd, run_cmd, score_cmd, site_cmd  # noqa: E402

app.command("list")(claims_cmd.list_claims)
app.command("show")(claims_cmd.show_claim)
app.command("run")(run_cmd.run)
app.command("score")(score_cmd.score)
app.command("site")(site_cmd.site)
from claimbench.cli.machine import model_cmd  # noqa: E402

app.add_typer(model_cmd.app, name="model")
from claimbench.cli.serving import bench_cmd, generate_cmd  # noqa: E402

app.command("generate")(generate_cmd.generate)
app.command("bench")(bench_cmd.bench)
from claimbench.cli.admin import tenants_cmd  # noqa: E402
from claimbench.cli.machine import doctor_cmd  # noqa: E402
from claimbench.cli.serving import serve_cmd  # noqa: E402

app.command("serve")(serve_cmd.serve)
app.command("doctor")(doctor_cmd.doctor)
app.add_typer(tenants_cmd.app, name="tenants")
from claimbench.cli.serving import engine_cmd  # noqa: E402

app.add_typer(engine_cmd.app, name="engine")
from claimbench.cli.machine import tpu_check_cmd  # noqa: E402

app.command("tpu-check")(tpu_check_cmd.tpu_check_command)
from claimbench.cli.claims import budget_cmd  # noqa: E402

app.command("budget")(budget_cmd.budget_command)
from claimbench.cli.claims import history_cmd  # noqa: E402

app.command("history")(history_cmd.history_command)
from claimbench.cli.admin import agents_cmd, audit_cmd  # noqa: E402
from claimbench.cli.serving import mcp_cmd  # noqa: E402

app.command("mcp")(mcp_cmd.mcp)
app.add_typer(agents_cmd.app, name="agents")
app.command("audit")(audit_cmd.audit)
