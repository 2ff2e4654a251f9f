"""The offline golden check (`claimbench doctor`): the engine's greedy completion of the golden
prompt (paged KV, batched step, the configured attention backend) against a plain dense forward
pass over the same weights."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GoldenCheck:
    """What the engine generated for the golden prompt, and what the model itself does."""

    model_path: Path
    dtype: str
    prompt: str
    engine_tokens: list[int]
    reference_tokens: list[int]
    engine_text: str
    reference_text: str

    @property
    def ok(self) -> bool:
        return self.engine_tokens == self.reference_tokens


def golden_check(model_path: Path | None, dtype: str, attention_backend: str) -> GoldenCheck:
    """Build a small engine over ``model_path`` (None: the shipped model) and compare its golden
    completion with the dense reference. Raises ValueError or FileNotFoundError for a model
    directory or backend that cannot be built."""
    from claimbench.engine.build import build_engine
    from claimbench.engine.config import EngineConfig
    from claimbench.models.checkpoint import default_model_path, load_model
    from claimbench.models.tokenizer import Tokenizer
    from claimbench.serving.monitoring.health import (
        GOLDEN_PROMPT,
        GOLDEN_TOKENS,
        record_golden,
        reference_tokens,
    )

    path = model_path or default_model_path()
    model, _ = load_model(path, dtype)
    tokenizer = Tokenizer.from_dir(path)
    config = EngineConfig(
        model_path=path,
        dtype=dtype,
        attention_backend=attention_backend,
        max_num_seqs=8,
        max_num_batched_tokens=64,
        max_model_len=128,
        kv_pool_bytes=16 * 2**20,
    )
    engine = build_engine(config, model=model, tokenizer=tokenizer)
    prompt_ids = tokenizer.encode(GOLDEN_PROMPT)
    got = record_golden(engine, prompt_ids)
    expected = reference_tokens(model, prompt_ids, GOLDEN_TOKENS)
    return GoldenCheck(
        model_path=path,
        dtype=dtype,
        prompt=GOLDEN_PROMPT,
        engine_tokens=got,
        reference_tokens=expected,
        engine_text=tokenizer.decode(got),
        reference_text=tokenizer.decode(expected),
    )
