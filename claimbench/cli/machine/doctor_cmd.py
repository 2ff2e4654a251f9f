"""`claimbench doctor`: the server's golden-output check, offline.

The engine's greedy completion of the golden prompt (paged KV, batched step, the
configured attention backend) must equal a plain dense forward pass over the same
weights. Exit 0 when it does, 1 when it does not.
"""

from __future__ import annotations

from typing import Annotated

import typer

from claimbench.cli.common import console, fail, global_options


def doctor(
    ctx: typer.Context,
    attention_backend: Annotated[
        str, typer.Option(help="auto | xla | cpu | pallas: the backend to check.")
    ] = "auto",
) -> None:
    """Check that the engine produces the model's own output (golden greedy completion)."""
    from claimbench.serving.monitoring.golden_check import golden_check

    opts = global_options(ctx)
    try:
        check = golden_check(opts.model, opts.dtype, attention_backend)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e).splitlines()[0])
    console.print(
        f"model {check.model_path} ({check.dtype}), prompt {check.prompt!r}", highlight=False
    )
    console.print(f"engine:    {check.engine_tokens} {check.engine_text!r}", highlight=False)
    console.print(f"reference: {check.reference_tokens} {check.reference_text!r}", highlight=False)
    if not check.ok:
        console.print(
            "[bold red]FAIL[/]: the engine's golden completion differs from the model's",
            markup=True,
        )
        raise typer.Exit(1)
    console.print("[green]PASS[/]: golden completion matches the dense reference", markup=True)
