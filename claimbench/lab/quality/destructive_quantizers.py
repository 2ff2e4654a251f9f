"""Quantizers that keep almost nothing: the counterfactual of a quantization-quality claim.

A claim that a format keeps the model's quality is only tested if its metric can see a format
that does not. These serve the same engine with the quantized arm's numbers destroyed, and
nothing else changed:

* ``DESTROYED_KV``: the KV cache in fp8 at a scale of 1e6. Every value is divided by the
  scale before it is rounded to e4m3, whose smallest step is 2**-9, so any |K| or |V| below
  about 2,000 is stored as zero: attention reads nothing back.
* ``two_level_checkpoint``: a copy of a checkpoint whose every matrix holds two values per
  output channel, sign(w) * mean(|w|) over the channel (the binary weights of XNOR-Net),
  which the fp8 arm then quantizes as usual (two values per channel are exact in e4m3 with
  a per-channel scale, so the damage is all the two-level rounding's).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import jax.numpy as jnp
from flax import nnx

from claimbench.models.checkpoint import load_model, save_model
from claimbench.models.llama import Embedding

DESTROYED_KV: dict[str, Any] = {"kv_dtype": "fp8", "kv_scale": 1e6}
TWO_LEVEL = "two-level"


def two_level(w: jnp.ndarray, channel_axis: int) -> jnp.ndarray:
    """f[a, b] -> f[a, b] holding sign(w) * mean(|w|) over each ``channel_axis`` index's values.

    A channel of zeros stays zeros."""
    if w.ndim != 2 or channel_axis not in (0, 1):
        raise ValueError(f"need a matrix and channel_axis 0 or 1, got {w.shape}, {channel_axis}")
    magnitude = jnp.mean(jnp.abs(w), axis=1 - channel_axis, keepdims=True)
    return jnp.sign(w) * magnitude


def checkpoint_digest(source: Path) -> str:
    """sha256 over the checkpoint's config.json and weight files (names and bytes)."""
    digest = hashlib.sha256()
    for file in sorted(source.iterdir()):
        if file.name == "config.json" or file.suffix == ".safetensors":
            digest.update(file.name.encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def two_level_checkpoint(source: Path, cache_dir: Path) -> Path:
    """The checkpoint at ``source`` with every matrix two-level (``two_level``; linear kernels
    [in, out] per output column, the embedding table per vocab row: the tied head's output
    channel), norms untouched, saved in bfloat16 with ``source``'s other files (tokenizer).

    Written once under ``cache_dir`` by content (a temporary directory renamed into place), so
    a run's provenance can hash it after the run; a later call returns the same directory."""
    source = Path(source)
    if not (source / "config.json").is_file():
        raise ValueError(f"{source} is not a checkpoint directory (no config.json)")
    target = Path(cache_dir) / f"{source.name}-{TWO_LEVEL}-{checkpoint_digest(source)}"
    if target.is_dir():
        return target
    model, cfg = load_model(source, jnp.float32)
    for _, module in nnx.iter_modules(model):
        if isinstance(module, nnx.Linear):
            module.kernel[...] = two_level(module.kernel[...], channel_axis=1)
        elif isinstance(module, Embedding):
            module.embedding[...] = two_level(module.embedding[...], channel_axis=0)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        for file in source.iterdir():
            if file.is_file() and file.suffix != ".safetensors" and file.name != "config.json":
                shutil.copy(file, staging / file.name)
        save_model(model, cfg, staging, dtype="bfloat16")
        os.replace(staging, target)
    except OSError:
        if not target.is_dir():
            raise
        # Another process renamed the same content into place first: theirs is as good.
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # already gone once renamed
    return target
