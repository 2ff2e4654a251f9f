"""Shared CLI plumbing: global options and the one-line error exit."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

# Piped output (| less, > file, CI logs) gets no terminal width and rich would wrap the
# claim tables at 80 columns; give it room unless COLUMNS says otherwise.
_PIPED_WIDTH = None if sys.stdout.isatty() or "COLUMNS" in os.environ else 160
# Markup off: what is printed (paths, names, claim text, generated text, error messages) may
# hold "[...]", which rich would read as a style tag ("[/x]" a traceback). A line that styles
# literal text of its own passes markup=True and escapes whatever it interpolates.
console = Console(width=_PIPED_WIDTH, markup=False)
err_console = Console(stderr=True, markup=False)


@dataclass(frozen=True)
class GlobalOptions:
    root: Path  # the claims project: claims.yaml, experiments/, results/, site/
    model: Path | None  # None = the shipped claimbench-tiny
    dtype: str  # "bfloat16" | "float32"


def global_options(ctx: typer.Context) -> GlobalOptions:
    """The options given before the command (set by the app callback)."""
    return ctx.find_root().obj


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one line naming the problem to stderr and exit non-zero, never a traceback."""
    err_console.print(
        f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False, soft_wrap=True
    )
    raise typer.Exit(code)


def option_flags(names: Iterable[str]) -> dict[str, str]:
    """Config field -> the CLI flag that sets it, for fields named like their option:
    ``max_tokens`` -> ``--max-tokens``."""
    return {name: "--" + name.replace("_", "-") for name in names}


def flag_message(err: Exception, flags: dict[str, str]) -> str:
    """The first line of a config's ValueError with each field name replaced by its flag, so the
    user reads the option they typed (``--top-p``) rather than a dataclass field (``top_p``)."""
    lines = str(err).strip().splitlines()
    text = lines[0] if lines else type(err).__name__
    for name in sorted(flags, key=len, reverse=True):  # longest first: max_num_batched_tokens
        text = re.sub(rf"(?<![\w-]){re.escape(name)}(?!\w)", flags[name], text)
    return text
