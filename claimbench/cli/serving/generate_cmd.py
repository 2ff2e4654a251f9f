"""`claimbench generate "text"`: stream one completion from the engine.

stdout carries only the generated text (so it pipes); the timing summary goes to
stderr, or everything goes to stdout as one JSON object with --json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from claimbench.cli.common import err_console, fail, flag_message, global_options, option_flags
from claimbench.cli.serving.spec_options import (
    DraftModelOption,
    NumSpecTokensOption,
    Speculative,
    SpeculativeOption,
)
from claimbench.platform.cpu_devices import TPOption

if TYPE_CHECKING:
    from claimbench.models.config import ModelConfig
    from claimbench.models.tokenizer import Tokenizer

# SamplingParams fields set by the option of the same name.
SAMPLING_FLAGS = option_flags(("max_tokens", "temperature", "top_k", "top_p", "seed", "ignore_eos"))
SPEC_FLAGS = option_flags(("num_spec_tokens", "speculative", "tp"))


def generate(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="The prompt.")],
    max_tokens: Annotated[int, typer.Option(help="Output tokens at most.")] = 64,
    temperature: Annotated[float, typer.Option(help="0 = greedy.")] = 0.0,
    top_k: Annotated[int, typer.Option(help="Sample from the k most likely; 0 = all.")] = 0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling mass, in (0, 1].")] = 1.0,
    seed: Annotated[int | None, typer.Option(help="Sampling seed (reproducible).")] = None,
    ignore_eos: Annotated[bool, typer.Option(help="Keep going past end-of-text.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    speculative: SpeculativeOption = Speculative.none,
    num_spec_tokens: NumSpecTokensOption = 4,
    draft_model: DraftModelOption = None,
    tp: TPOption = 1,
) -> None:
    """Generate a completion, printing tokens as they are produced."""
    from claimbench.engine.build import build_engine
    from claimbench.engine.sampling_params import SamplingParams
    from claimbench.engine.worker.sharding import check_model_tp
    from claimbench.lab.engines.single_completion import complete, completion_config, timing_line

    opts = global_options(ctx)
    try:
        sampling = SamplingParams(
            max_tokens=max_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            ignore_eos=ignore_eos,
        )
    except ValueError as e:
        fail(flag_message(e, SAMPLING_FLAGS))
    path, model_cfg, tokenizer = _load_model(opts.model)
    prompt_ids = tokenizer.encode(text)
    max_len = model_cfg.max_position_embeddings
    if len(prompt_ids) + max_tokens > max_len:
        fail(f"prompt ({len(prompt_ids)} tokens) + --max-tokens {max_tokens} exceeds {max_len}")
    spec = dict(speculative=speculative.value, num_spec_tokens=num_spec_tokens, tp=tp)
    try:
        config = completion_config(
            path, opts.dtype, len(prompt_ids), max_len, draft_model_path=draft_model, **spec
        )
        check_model_tp(tp, model_cfg)
        engine = build_engine(config)
    except ValueError as e:
        fail(flag_message(e, SPEC_FLAGS))
    on_text = None if json_out else _write
    done = complete(engine, prompt_ids, sampling, tokenizer.stream_decoder(), on_text)
    if json_out:
        head = {"text": done.text, "token_ids": done.token_ids, "finish_reason": done.finish_reason}
        sys.stdout.write(json.dumps(head | done.timing) + "\n")
        return
    _write("\n" if sys.stdout.isatty() else "")
    err_console.print(timing_line(done.timing, done.finish_reason), style="dim", highlight=False)


def _load_model(model: Path | None) -> tuple[Path, ModelConfig, Tokenizer]:
    """The model's directory, config and tokenizer, or one line saying why not."""
    from claimbench.models.checkpoint import default_model_path, read_config
    from claimbench.models.tokenizer import Tokenizer

    try:
        path = model or default_model_path()
        return path, read_config(path), Tokenizer.from_dir(path)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e).splitlines()[0])


def _write(text: str) -> None:
    """Text to stdout at once, so it streams through a pipe."""
    sys.stdout.write(text)
    sys.stdout.flush()
