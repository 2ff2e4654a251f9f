"""One model's size and held-out quality, as `claimbench model info` prints it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from claimbench.models.checkpoint import load_model
from claimbench.models.llama import param_count, weight_bytes
from claimbench.models.tokenizer import Tokenizer
from claimbench.training.evaluate import evaluate_heldout


def describe_model(
    path: Path, *, dtype: str = "bfloat16", num_windows: int = 64, length: int = 256
) -> dict[str, Any]:
    """Load ``path`` in ``dtype`` and score ``num_windows`` held-out windows of ``length``."""
    model, cfg = load_model(path, dtype)
    result = evaluate_heldout(
        model, Tokenizer.from_dir(path), num_windows=num_windows, length=length
    )
    return {
        "name": Path(path).name,
        "path": str(path),
        "architecture": cfg.architecture,
        "dtype": dtype,
        "params": param_count(model),
        "weight_bytes": weight_bytes(model),
        "num_windows": result.num_windows,
        "num_tokens": result.num_tokens,
        "num_bytes": result.num_bytes,
        "loss_per_token": result.loss_per_token,
        "ppl_per_token": result.ppl_per_token,
        "loss_per_byte": result.loss_per_byte,
        "bits_per_byte": result.bits_per_byte,
        "ppl_per_byte": result.ppl_per_byte,
    }
