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
    from claimbench.engine.build import build_engine
    from claimbench.engine.config import EngineConfig
    from claimbench.models.checkpoint import default_model_path, load_model
    from claimbench.models.tokenizer import Tokenizer
    from claimbench.serving.health import (
        GOLDEN_PROMPT,
        GOLDEN_TOKENS,
        record_golden,
        reference_tokens,
    )

    opts = global_options(ctx)
    path = opts.model or default_model_path()
    try:
        model, _ = load_model(path, opts.dtype)
        tokenizer = Tokenizer.from_dir(path)
        config = EngineConfig(
            model_path=path,
            dtype=opts.dtype,
            attention_backend=attention_backend,
            max_num_seqs=8,
            max_num_batched_tokens=64,
            max_model_len=128,
            kv_pool_bytes=16 * 2**20,
        )
        engine = build_engine(config, model=model, tokenizer=tokenizer)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e).splitlines()[0])
    prompt_ids = tokenizer.encode(GOLDEN_PROMPT)
    got = record_golden(engine, prompt_ids)
    expected = reference_tokens(model, prompt_ids, GOLDEN_TOKENS)
    console.print(f"model {path} ({opts.dtype}), prompt {GOLDEN_PROMPT!r}", highlight=False)
    console.print(f"engine:    {got} {tokenizer.decode(got)!r}", highlight=False)
    console.print(f"reference: {expected} {tokenizer.decode(expected)!r}", highlight=False)
    if got != expected:
        console.print("[bold red]FAIL[/]: the engine's golden completion differs from the model's")
        raise typer.Exit(1)
    console.print("[green]PASS[/]: golden completion matches the dense reference")
