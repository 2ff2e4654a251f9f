"""Exit heads: a next-token head on intermediate layers, for early exit (early_exit.py).

The head after layer ``n`` (n layers run) is a copy of the model's final RMSNorm followed by
a residual d x d adapter, zero-initialised, then the model's own output head (tied
embeddings or lm_head, frozen). At initialisation a head is exactly "final norm + LM head
on an intermediate hidden state"; distillation (exit_train.py) trains only the norm gain
and the adapter. Heads are saved beside the model in its HF directory:
``exit_heads.safetensors`` (tensors ``exit_heads.{n}.norm.weight`` and
``exit_heads.{n}.adapter.weight``, [out, in] as transformers stores linears) and
``early_exit.json`` (the exit layers, the default confidence threshold, the measured
quality).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from claimbench.models.json_files import ModelLoadError, read_json_object
from claimbench.models.llama import LlamaForCausalLM, RMSNorm

HEADS_FILE = "exit_heads.safetensors"
CONFIG_FILE = "early_exit.json"
DEFAULT_THRESHOLD = 0.9


class ExitHead(nnx.Module):
    """f[..., hidden] (a layer's residual stream) -> f[..., hidden], normed for the LM head."""

    def __init__(self, final_norm: RMSNorm, *, dtype) -> None:
        dim = final_norm.weight.shape[0]
        self.norm = RMSNorm(dim, final_norm.eps, dtype=dtype)
        self.norm.weight[...] = final_norm.weight[...].astype(dtype)
        self.adapter = nnx.Linear(
            dim,
            dim,
            use_bias=False,
            dtype=dtype,
            param_dtype=dtype,
            kernel_init=nnx.initializers.zeros_init(),
            rngs=nnx.Rngs(0),
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.norm(x)
        return h + self.adapter(h)


class ExitHeads(nnx.Module):
    """One ExitHead per exit layer; ``layers`` are layer counts (head n runs after n layers)."""

    def __init__(self, model: LlamaForCausalLM, layers: tuple[int, ...], *, dtype=None) -> None:
        num_layers = model.cfg.num_layers
        if not layers or list(layers) != sorted(set(layers)):
            raise ValueError(f"exit layers must be distinct and increasing, got {layers}")
        if not all(1 <= n < num_layers for n in layers):
            raise ValueError(f"exit layers must lie in [1, {num_layers - 1}], got {layers}")
        dtype = model.dtype if dtype is None else dtype
        self.layers = tuple(layers)
        self.heads = nnx.List([ExitHead(model.norm, dtype=dtype) for _ in layers])

    def head_after(self, num_layers_run: int) -> ExitHead | None:
        """The head that runs after ``num_layers_run`` layers, or None."""
        if num_layers_run not in self.layers:
            return None
        return self.heads[self.layers.index(num_layers_run)]


def save_exit_heads(
    heads: ExitHeads, path: Path, *, threshold: float, quality: dict[str, Any] | None = None
) -> None:
    """Write exit_heads.safetensors (bf16 when the heads are) and early_exit.json to ``path``."""
    tensors = {}
    for n, head in zip(heads.layers, heads.heads, strict=True):
        tensors[f"exit_heads.{n}.norm.weight"] = np.asarray(head.norm.weight[...])
        tensors[f"exit_heads.{n}.adapter.weight"] = np.ascontiguousarray(
            np.asarray(head.adapter.kernel[...]).T
        )
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / HEADS_FILE), metadata={"format": "pt"})
    config = {"exit_layers": list(heads.layers), "threshold": threshold}
    if quality is not None:
        config["quality"] = quality
    (path / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")


def read_exit_config(path: Path) -> dict[str, Any]:
    """early_exit.json of a model directory; FileNotFoundError names the missing file."""
    config_path = Path(path) / CONFIG_FILE
    if not config_path.is_file() or not (Path(path) / HEADS_FILE).is_file():
        raise FileNotFoundError(
            f"no exit heads in {path} (expected {HEADS_FILE} and {CONFIG_FILE}; "
            "train them with `claimbench model train-exits`)"
        )
    return read_json_object(config_path)


def load_exit_heads(path: Path, model: LlamaForCausalLM) -> ExitHeads:
    """The exit heads saved in model directory ``path``, in the model's dtype; a file that is
    not what ``save_exit_heads`` writes is a ModelLoadError naming it."""
    config = read_exit_config(path)
    layers = config.get("exit_layers")
    if not isinstance(layers, list) or not all(isinstance(n, int) for n in layers):
        raise ModelLoadError(f"{Path(path) / CONFIG_FILE}: exit_layers must be a list of ints")
    heads = ExitHeads(model, tuple(layers))
    file = Path(path) / HEADS_FILE
    try:
        tensors = load_file(str(file))
    except SafetensorError as e:
        reason = (str(e).strip().splitlines() or ["unreadable"])[0]
        raise ModelLoadError(f"{file} is not a readable safetensors file: {reason}") from e
    for n, head in zip(heads.layers, heads.heads, strict=True):
        names = (f"exit_heads.{n}.norm.weight", f"exit_heads.{n}.adapter.weight")
        missing = [name for name in names if name not in tensors]
        if missing:
            raise ModelLoadError(f"{file} lacks {missing}")
        norm, adapter = tensors[names[0]], tensors[names[1]].T
        if norm.shape != head.norm.weight.shape or adapter.shape != head.adapter.kernel.shape:
            raise ModelLoadError(
                f"exit head {n} in {path} has shapes {norm.shape}, {adapter.shape}; "
                f"the model needs {head.norm.weight.shape}, {head.adapter.kernel.shape}"
            )
        head.norm.weight[...] = jnp.asarray(norm, model.dtype)
        head.adapter.kernel[...] = jnp.asarray(adapter, model.dtype)
    return heads
