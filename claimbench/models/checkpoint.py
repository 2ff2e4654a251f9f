"""Load and save Hugging Face-format checkpoints (config.json + safetensors) for the NNX model.

Only local directories: loading never downloads anything. Every failure a user can cause
(missing directory or file, unsupported architecture, shape mismatch, unknown dtype)
raises ``ModelLoadError`` whose message is one line naming the problem.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from claimbench.models.config import ModelConfig
from claimbench.models.generation_config import read_stop_token_ids
from claimbench.models.json_files import ModelLoadError, read_json_object
from claimbench.models.llama import LlamaForCausalLM
from claimbench.models.moe import build_model, expert_tensor_names

ASSETS_DIR = Path(__file__).parent / "assets"
DTYPES = {
    "bfloat16": jnp.bfloat16,
    "bf16": jnp.bfloat16,
    "float32": jnp.float32,
    "f32": jnp.float32,
    "float16": jnp.float16,
}
# safetensors dtype tags we can read; anything else (e.g. pre-quantized int4) is refused.
STORED_DTYPES = ("F32", "BF16", "F16")
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def default_model_path() -> Path:
    """The shipped claimbench-tiny checkpoint directory."""
    return ASSETS_DIR / "claimbench-tiny"


def default_draft_path() -> Path:
    """The shipped claimbench-tiny-draft checkpoint directory (same tokenizer)."""
    return ASSETS_DIR / "claimbench-tiny-draft"


def default_moe_path() -> Path:
    """The shipped claimbench-tiny-moe checkpoint directory (same tokenizer, same active
    parameters per token as claimbench-tiny)."""
    return ASSETS_DIR / "claimbench-tiny-moe"


def resolve_dtype(dtype: Any) -> jnp.dtype:
    """A dtype name ("bfloat16", "float32", ...) or jnp dtype -> jnp.dtype."""
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ModelLoadError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
        return jnp.dtype(DTYPES[dtype])
    try:
        resolved = jnp.dtype(dtype)
    except TypeError as e:
        raise ModelLoadError(f"unknown dtype {dtype!r}") from e
    if resolved not in {jnp.dtype(d) for d in DTYPES.values()}:
        raise ModelLoadError(f"unsupported model dtype {resolved}; expected bfloat16 or float32")
    return resolved


def read_config(path: Path) -> ModelConfig:
    """Parse ``path/config.json`` into a ModelConfig, its stop ids generation_config.json's
    where that file names them (ModelLoadError on any problem, naming the file)."""
    path = Path(path)
    if not path.is_dir():
        raise ModelLoadError(f"model directory {path} does not exist")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelLoadError(f"{config_file} is missing")
    hf = read_json_object(config_file)
    try:
        cfg = ModelConfig.from_hf(hf)
    except (KeyError, TypeError, ValueError) as e:
        detail = f"missing field {e}" if isinstance(e, KeyError) else str(e)
        raise ModelLoadError(f"{config_file}: {detail}") from e
    try:
        stop_ids = read_stop_token_ids(path, cfg.vocab_size)
    except ValueError as e:
        raise ModelLoadError(str(e)) from e
    return cfg if stop_ids is None else dataclasses.replace(cfg, stop_token_ids=stop_ids)


def hf_name(path: tuple) -> tuple[str, bool]:
    """An NNX param path -> (transformers tensor name, whether the matrix is transposed).

    nnx.Linear keeps kernel [in, out]; transformers keeps weight [out, in].
    """
    parts = [str(p) for p in path]
    transpose = parts[-1] == "kernel"
    if parts[-1] in ("kernel", "embedding"):
        parts[-1] = "weight"
    name = ".".join(parts)
    return (name if parts[0] == "lm_head" else f"model.{name}"), transpose


@contextlib.contextmanager
def _open_weights(file: Path) -> Iterator[Any]:
    """``safe_open`` on ``file``, a file that is not safetensors (truncated, overwritten, a
    stray download page) a ModelLoadError naming it."""
    try:
        with safe_open(file, framework="numpy") as f:
            yield f
    except SafetensorError as e:
        reason = (str(e).strip().splitlines() or ["unreadable"])[0]
        raise ModelLoadError(f"{file} is not a readable safetensors file: {reason}") from e


def _weight_files(path: Path) -> dict[str, Path]:
    """Tensor name -> safetensors file holding it (single file or sharded index)."""
    single, index = path / SINGLE_FILE, path / INDEX_FILE
    if index.is_file():
        weight_map = read_json_object(index).get("weight_map")
        if not isinstance(weight_map, dict) or not all(
            isinstance(v, str) for v in weight_map.values()
        ):
            raise ModelLoadError(f"{index} has no valid weight_map (tensor name -> file)")
        files = {name: path / shard for name, shard in weight_map.items()}
        for shard in sorted(set(files.values())):
            if not shard.is_file():
                raise ModelLoadError(f"{shard} (listed in {INDEX_FILE}) is missing")
        return files
    if single.is_file():
        with _open_weights(single) as f:
            return {name: single for name in f.keys()}  # noqa: SIM118 (safe_open has no iter)
    raise ModelLoadError(f"{path} has neither {SINGLE_FILE} nor {INDEX_FILE}")


def _read_tensor(
    file: Path, name: str, shape: tuple[int, ...], transpose: bool, dtype
) -> np.ndarray:
    with _open_weights(file) as f:
        tensor_slice = f.get_slice(name)
        stored_dtype = tensor_slice.get_dtype()
        if stored_dtype not in STORED_DTYPES:
            raise ModelLoadError(
                f"tensor {name} has unknown dtype {stored_dtype}; expected {STORED_DTYPES}"
            )
        stored_shape = tuple(tensor_slice.get_shape())
        expected = tuple(reversed(shape)) if transpose else shape
        if stored_shape != expected:
            raise ModelLoadError(
                f"shape mismatch for tensor {name}: checkpoint {stored_shape}, model {expected}"
            )
        value = f.get_tensor(name)
    # Transpose and cast on the host: no per-shape XLA compiles while loading.
    return (value.T if transpose else value).astype(dtype)


def _read_param(files: dict[str, Path], path: Path, param_path: tuple, shape, cfg, dtype):
    """One NNX param's value from the checkpoint; MoE expert stacks gather E tensors."""
    name, transpose = hf_name(param_path)
    names = expert_tensor_names(name, cfg.num_experts) or [name]
    for tensor in names:
        if tensor not in files:
            raise ModelLoadError(f"tensor {tensor} is missing from {path}")
    if len(names) == 1:
        return jnp.asarray(_read_tensor(files[name], name, shape, transpose, dtype))
    # Mixtral stores each expert's matrix as its own [out, in] tensor.
    parts = [_read_tensor(files[t], t, shape[1:], True, dtype) for t in names]
    return jnp.asarray(np.stack(parts))


def load_module_state(
    path: str | Path, cfg: ModelConfig, module: nnx.Module, prefix: tuple, dtype: Any
) -> nnx.State:
    """The params of one submodule of the model at ``path`` (``module``: its abstract
    shape, e.g. ``nnx.eval_shape`` of the model's ``.layers[3]``; ``prefix``: its path from
    the model, ("layers", 3)), read from the checkpoint alone and cast to ``dtype``: a
    caller can hold one layer of a model at a time."""
    path = Path(path)
    files = _weight_files(path)
    values = []
    for param_path, variable in nnx.to_flat_state(nnx.state(module)):
        full = (*prefix, *param_path)
        value = _read_param(files, path, full, tuple(variable.shape), cfg, resolve_dtype(dtype))
        values.append((param_path, variable.replace(value)))
    return nnx.from_flat_state(values)


def load_model(
    path: str | Path, dtype: Any = jnp.bfloat16, *, host: bool = False
) -> tuple[LlamaForCausalLM, ModelConfig]:
    """Load a local HF Llama / Qwen2 / Mixtral directory with params in ``dtype``.

    Mixtral checkpoints load as models.moe.MixtralForCausalLM (a LlamaForCausalLM subclass).
    ``host`` keeps the params in host memory (the CPU device) for a caller that places them
    itself: tensor parallelism splits them over several chips, none of which need hold the
    whole model on the way.
    """
    with jax.default_device(_host_device()) if host else contextlib.nullcontext():
        return _load_model(Path(path), dtype)


def _host_device() -> jax.Device | None:
    """The CPU device, or None (JAX's default) where JAX_PLATFORMS leaves the CPU out."""
    try:
        return jax.devices("cpu")[0]
    except RuntimeError:
        return None


def _load_model(path: Path, dtype: Any) -> tuple[LlamaForCausalLM, ModelConfig]:
    dtype = resolve_dtype(dtype)
    cfg = read_config(path)
    files = _weight_files(path)
    # Build the module abstractly (no random init of a possibly large model), then fill it.
    abstract = nnx.eval_shape(lambda: build_model(cfg, dtype=dtype, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    flat = nnx.to_flat_state(state)
    values = []
    for param_path, variable in flat:
        shape = tuple(variable.shape)
        value = _read_param(files, path, param_path, shape, cfg, dtype)
        values.append((param_path, variable.replace(value)))
    model = nnx.merge(graphdef, nnx.from_flat_state(values))
    return model, cfg


def hf_state_dict(model: LlamaForCausalLM, dtype: Any | None = None) -> dict[str, np.ndarray]:
    """The model's params under transformers' tensor names (host arrays), cast to ``dtype``."""
    tensors = {}
    for param_path, variable in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        name, transpose = hf_name(param_path)
        value = np.asarray(variable[...])
        value = value if dtype is None else value.astype(dtype)
        expert_names = expert_tensor_names(name, model.cfg.num_experts)
        if expert_names is not None:
            for tensor, matrix in zip(expert_names, value, strict=True):
                tensors[tensor] = np.ascontiguousarray(matrix.T)
            continue
        tensors[name] = np.ascontiguousarray(value.T if transpose else value)
    return tensors


def save_model(
    model: LlamaForCausalLM, cfg: ModelConfig, path: str | Path, *, dtype: Any | None = None
) -> None:
    """Write config.json + model.safetensors (in ``dtype``, default the params' own) to ``path``.

    The tokenizer is written separately (``Tokenizer.save``), as transformers does.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_dtype = model.dtype if dtype is None else resolve_dtype(dtype)
    tensors = hf_state_dict(model, save_dtype)
    config = cfg.to_hf(torch_dtype=jnp.dtype(save_dtype).name)
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file(tensors, str(path / SINGLE_FILE), metadata={"format": "pt"})
