"""One prompt's completion on an engine of its own (`claimbench generate`): the step budget
that fits the prompt, the engine's config, and the run, streaming text as it comes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from claimbench.engine.config import EngineConfig
from claimbench.engine.engine import LLMEngine
from claimbench.engine.outputs import FinishEvent, TokenEvent
from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.metrics.serving_summary import spec_decode_summary

MIN_CHUNK_TOKENS = 16  # the smallest step: one compiled shape for a short prompt
MAX_CHUNK_TOKENS = 64  # prefill chunk: three compiled step shapes (16, 32, 64) at most


class TextDecoder(Protocol):
    """Token ids to text as they come (models.tokenizer.StreamDecoder)."""

    def push(self, token_id: int) -> str: ...

    def flush(self) -> str: ...


@dataclass(frozen=True)
class Completion:
    """The finished request: its text, tokens, why it stopped, and its timing."""

    text: str | None  # None when the engine has no tokenizer
    token_ids: list[int]
    finish_reason: str | None
    timing: dict[str, Any]  # tokens, TTFT/TPOT/E2EL, compile, speculation's metrics


def step_budget(num_prompt_tokens: int) -> int:
    """Tokens per step: the smallest power of two from MIN_CHUNK_TOKENS that holds the prompt,
    at most MAX_CHUNK_TOKENS (a longer prompt is prefilled in chunks), so one request compiles
    only the step shapes it uses."""
    budget = MIN_CHUNK_TOKENS
    while budget < min(num_prompt_tokens, MAX_CHUNK_TOKENS):
        budget *= 2
    return budget


def completion_config(
    model_path: Path, dtype: str, num_prompt_tokens: int, max_model_len: int, **spec: Any
) -> EngineConfig:
    """One sequence at a time, a step budget fitted to the prompt; ``spec`` sets speculation
    and tensor parallelism (speculative, num_spec_tokens, draft_model_path, tp).
    ValueError on a bad setting, naming its field."""
    return EngineConfig(
        model_path=model_path,
        dtype=dtype,
        max_num_seqs=1,
        max_num_batched_tokens=step_budget(num_prompt_tokens),
        max_model_len=max_model_len,
        **spec,
    )


def complete(
    engine: LLMEngine,
    prompt_ids: list[int],
    sampling: SamplingParams,
    decoder: TextDecoder,
    on_text: Callable[[str], None] | None = None,
) -> Completion:
    """Compile the engine's step shapes, then run one request to its end, passing each piece of
    decoded text to ``on_text`` as its token arrives (the decoder's tail last)."""
    num_compiled, compile_s = engine.precompile()
    request_id = engine.add_request(prompt_ids, sampling)
    reason = None
    while engine.has_unfinished:
        for event in engine.step():
            if isinstance(event, TokenEvent) and on_text is not None:
                on_text(decoder.push(event.token_id))
            elif isinstance(event, FinishEvent):
                reason = event.reason
    if on_text is not None:
        on_text(decoder.flush())
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
    return Completion(out.text, list(out.token_ids), reason, timing)


def timing_line(timing: dict[str, Any], finish_reason: str | None) -> str:
    """The one-line summary `generate` prints after the text."""
    tpot = "-" if timing["tpot_s"] is None else f"{1000 * timing['tpot_s']:.1f} ms"
    line = (
        f"{timing['prompt_tokens']} prompt + {timing['output_tokens']} output tokens "
        f"({finish_reason}) · TTFT {1000 * timing['ttft_s']:.1f} ms · TPOT {tpot} · "
        f"{timing['output_tokens_per_s']:.1f} tok/s · compiled {timing['num_compiled']} step "
        f"shapes in {timing['compile_s']:.1f} s"
    )
    if "mean_acceptance_length" in timing:
        line += f" · acceptance length {timing['mean_acceptance_length']:.2f}"
    return line
