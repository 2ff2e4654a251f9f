"""`claimbench generate "text"`: stream one completion from the engine.

stdout carries only the generated text (so it pipes); the timing summary goes to
stderr, or everything goes to stdout as one JSON object with --json.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from claimbench.cli.common import err_console, fail, flag_message, global_options, option_flags
from claimbench.cli.spec_options import (
    DraftModelOption,
    NumSpecTokensOption,
    Speculative,
    SpeculativeOption,
)
from claimbench.platform.cpu_devices import TPOption

MAX_CHUNK_TOKENS = 64  # prefill chunk: three compiled step shapes (16, 32, 64) at most
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
    from claimbench.engine.config import EngineConfig
    from claimbench.engine.outputs import FinishEvent, TokenEvent
    from claimbench.engine.worker.sampler import SamplingParams
    from claimbench.engine.worker.sharding import check_model_tp
    from claimbench.lab.serving_summary import spec_decode_summary
    from claimbench.models.checkpoint import default_model_path, read_config
    from claimbench.models.tokenizer import Tokenizer

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
    try:
        path = opts.model or default_model_path()
        model_cfg = read_config(path)
        tokenizer = Tokenizer.from_dir(path)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e).splitlines()[0])
    prompt_ids = tokenizer.encode(text)
    max_len = model_cfg.max_position_embeddings
    if len(prompt_ids) + max_tokens > max_len:
        fail(f"prompt ({len(prompt_ids)} tokens) + --max-tokens {max_tokens} exceeds {max_len}")
    budget = 16
    while budget < min(len(prompt_ids), MAX_CHUNK_TOKENS):
        budget *= 2
    try:
        config = EngineConfig(
            model_path=path,
            dtype=opts.dtype,
            max_num_seqs=1,
            max_num_batched_tokens=budget,
            max_model_len=max_len,
            speculative=speculative.value,
            num_spec_tokens=num_spec_tokens,
            draft_model_path=draft_model,
            tp=tp,
        )
        check_model_tp(tp, model_cfg)
        engine = build_engine(config)
    except ValueError as e:
        fail(flag_message(e, SPEC_FLAGS))
    num_compiled, compile_s = engine.precompile()
    request_id = engine.add_request(prompt_ids, sampling)
    decoder = tokenizer.stream_decoder()
    stream = not json_out
    reason = None
    while engine.has_unfinished:
        for event in engine.step():
            if isinstance(event, TokenEvent) and stream:
                sys.stdout.write(decoder.push(event.token_id))
                sys.stdout.flush()
            elif isinstance(event, FinishEvent):
                reason = event.reason
    if stream:
        sys.stdout.write(decoder.flush() + ("\n" if sys.stdout.isatty() else ""))
        sys.stdout.flush()
    row = engine.requests_frame().iloc[0]
    out = engine.output(request_id)
    timing = {
        "prompt_tokens": int(row["prompt_tokens"]),
        "output_tokens": int(row["output_tokens"]),
        "ttft_s": float(row["ttft_s"]),
        "tpot_s": None if row["output_tokens"] < 2 else float(row["tpot_s"]),
        "e2el_s": float(row["e2el_s"]),
        "output_tokens_per_s": float(row["output_tokens"] / row["e2el_s"]),
        "compile_s": compile_s,
        "num_compiled": num_compiled,
        **spec_decode_summary(engine.steps_frame()),
    }
    if json_out:
        payload = {"text": out.text, "token_ids": out.token_ids, "finish_reason": reason, **timing}
        sys.stdout.write(json.dumps(payload) + "\n")
        return
    tpot = "-" if timing["tpot_s"] is None else f"{1000 * timing['tpot_s']:.1f} ms"
    err_console.print(
        f"[dim]{timing['prompt_tokens']} prompt + {timing['output_tokens']} output tokens "
        f"({reason}) · TTFT {1000 * timing['ttft_s']:.1f} ms · TPOT {tpot} · "
        f"{timing['output_tokens_per_s']:.1f} tok/s · compiled {num_compiled} step shapes "
        f"in {compile_s:.1f} s"
        + (
            f" · acceptance length {timing['mean_acceptance_length']:.2f}"
            if "mean_acceptance_length" in timing
            else ""
        )
        + "[/]",
        highlight=False,
    )
