"""Compile the engine's whole step for a TPU on a host without one (libtpu ahead of time).

libtpu can describe a TPU topology and compile for it on any host: the step is lowered
with every argument given as a ShapeDtypeStruct placed on one device of that topology (no
weights are read, so an 8B model needs no download and no memory), with the Pallas
attention kernel compiled, not interpreted. Per (token, sequence) bucket it reports
whether Mosaic and XLA compile it, how long that takes, what the executable needs in HBM
against the chip's capacity, how many whole-KV-array copies XLA inserted (each one moves
a layer's entire cache every step), and the compiler's bytes accessed over the bytes an
ideal step moves.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from claimbench.engine.batch import empty_inputs
from claimbench.engine.buckets import bucket_pairs
from claimbench.engine.config import EngineConfig
from claimbench.engine.kv_cache import (
    allocate_kv_cache,
    kv_bytes_per_token,
    num_pages_for_pool,
    page_layout,
    resolve_kv_dtype,
)

# The engine's jitted step itself (not a copy of it) is what must compile for the chip.
from claimbench.engine.runner import StaticModel
from claimbench.engine.runner import _step as engine_step
from claimbench.harness.hardware import get_chip
from claimbench.harness.hlo_copies import count_full_copies, hlo_shape
from claimbench.harness.model_presets import TINY_NAME, get_preset, model_config
from claimbench.kernels.backend import get_backend
from claimbench.models.checkpoint import read_config
from claimbench.models.config import ModelConfig
from claimbench.models.llama import LlamaForCausalLM, rope_table
from claimbench.models.quantize import quantize_weights

TPU_CHIPS = ("v5e", "v6e")
PROFILES = ("quick", "full")
# The topology libtpu is asked for: its smallest host-sized slice; one device of it is used.
_TOPOLOGY = {"v5e": "v5e:2x2", "v6e": "v6e:2x2"}
# The full profile's model: the series' Llama-3.1-8B layout (model_presets), as shapes only.
FULL_MODEL = "llama-3.1-8b"
# The full profile's engine: the claims' full-profile serving shape, with a KV pool that
# leaves a v6e room for bf16 weights (16 GB) and the step's temporaries.
FULL_ENGINE = EngineConfig(
    max_num_seqs=32, max_num_batched_tokens=512, max_model_len=1024, kv_pool_bytes=8 * 2**30
)


@dataclass(frozen=True)
class BucketReport:
    """One compiled (or failed) bucket. Bytes are the executable's, padding included."""

    num_tokens: int
    num_seqs: int
    error: str | None  # one line: the compile error, the HBM overflow or the copies; None = ok
    compile_s: float
    weight_bytes: int  # the weights as given (quantized values and scales)
    kv_pool_bytes: int  # the pool the engine allocates
    argument_bytes: int = 0  # executable's inputs: weights, pool, step inputs, as laid out
    temp_bytes: int = 0  # the executable's scratch
    total_bytes: int = 0  # arguments + non-aliased outputs + temporaries + code
    hbm_bytes: int = 0  # the chip's HBM
    full_cache_copies: int = 0
    bytes_accessed: float = 0.0  # the compiler's cost analysis
    ideal_bytes: float = 0.0  # weights + the most KV the bucket can read and write

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def bytes_over_ideal(self) -> float:
        return self.bytes_accessed / self.ideal_bytes if self.ideal_bytes else float("nan")


@dataclass(frozen=True)
class CheckReport:
    """Every bucket of one model compiled for one chip."""

    chip: str
    model: str
    weights: str
    kv_dtype: str
    num_pages: int
    buckets: list[BucketReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(b.ok for b in self.buckets)

    def to_json(self) -> dict[str, Any]:
        rows = [
            {**asdict(b), "ok": b.ok, "bytes_over_ideal": b.bytes_over_ideal} for b in self.buckets
        ]
        return {**asdict(self), "buckets": rows, "ok": self.ok}


def libtpu_unavailable() -> str | None:
    """Why libtpu cannot be used here, or None. Install the `tpu` extra to get it."""
    if importlib.util.find_spec("libtpu") is None:
        return "libtpu is not installed (pip install 'claimbench[tpu]')"
    return None


def tpu_device(chip: str) -> jax.Device:
    """A device of a ``chip`` topology that libtpu describes without the chip being here."""
    if chip not in _TOPOLOGY:
        raise ValueError(f"chip {chip!r} is not one of {TPU_CHIPS}")
    if (reason := libtpu_unavailable()) is not None:
        raise RuntimeError(reason)
    if not _tpu_vm():
        # No metadata server to ask here, and other JAX processes on this host may hold
        # libtpu's lockfile (it guards a real chip, which compiling does not touch).
        os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from jax.experimental import topologies

    topology = topologies.get_topology_desc(platform="tpu", topology_name=_TOPOLOGY[chip])
    return topology.devices[0]


def _tpu_vm() -> bool:
    """Whether this host has TPU chips attached (their device nodes), without starting JAX."""
    return bool(glob.glob("/dev/accel*")) or os.path.isdir("/dev/vfio")


def resolve_model(name: str) -> tuple[str, ModelConfig]:
    """A model given by name: "claimbench-tiny" (shipped), a preset, or a local HF directory
    (its config.json only)."""
    if name == TINY_NAME:
        from claimbench.models.checkpoint import default_model_path

        return name, read_config(default_model_path())
    path = Path(name)
    if path.is_dir():
        return path.name, read_config(path)
    return name, model_config(get_preset(name))


def profile_setup(profile: str) -> tuple[str, EngineConfig]:
    """(model name, engine config) a profile is checked at."""
    if profile == "quick":
        return TINY_NAME, EngineConfig()
    if profile == "full":
        return FULL_MODEL, FULL_ENGINE
    raise ValueError(f"profile {profile!r} is not one of {PROFILES}")


def check(
    chip: str,
    model_cfg: ModelConfig,
    engine_cfg: EngineConfig,
    *,
    model_name: str,
    buckets: list[tuple[int, int]] | None = None,
    device: jax.Device | None = None,
) -> CheckReport:
    """Compile the engine step for ``chip`` at ``buckets`` (default: every bucket pair)."""
    spec = get_chip(chip)
    device = device or tpu_device(chip)
    sharding = jax.sharding.SingleDeviceSharding(device)
    dtype = jnp.dtype(engine_cfg.dtype)

    def placed(x: Any) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

    def build() -> LlamaForCausalLM:
        model = LlamaForCausalLM(model_cfg, dtype=dtype, rngs=nnx.Rngs(0))
        return quantize_weights(model, engine_cfg.weights)

    graphdef, state = nnx.split(nnx.eval_shape(build))
    leaves, treedef = jax.tree.flatten(state)
    weights = [placed(w) for w in leaves]
    weight_bytes = sum(int(w.size) * w.dtype.itemsize for w in weights)
    kv_dtype = resolve_kv_dtype(engine_cfg.kv_dtype, engine_cfg.dtype)
    page_size = engine_cfg.page_size
    # The pool as the runner lays it out for the Pallas kernel.
    kv_cfg = page_layout(model_cfg, "pallas")
    num_pages = num_pages_for_pool(kv_cfg, kv_dtype, page_size, engine_cfg.kv_pool_bytes)
    caches = jax.eval_shape(lambda: allocate_kv_cache(kv_cfg, num_pages, page_size, kv_dtype))
    caches = jax.tree.map(placed, caches)
    kv_pool_bytes = sum(int(c.size) * c.dtype.itemsize for c in jax.tree.leaves(caches))
    # The pages and int8's per-row scales ([2 * kv_heads, slots]) grow with the pool; fp8's
    # two per-layer scales are scalars the kernel reads from SMEM, and moving them costs
    # nothing.
    cache_shapes = {
        hlo_shape(c.dtype.name, c.shape) for c in jax.tree.leaves(caches) if len(c.shape) >= 2
    }
    rope = jax.tree.map(
        placed, jax.eval_shape(lambda: rope_table(model_cfg, engine_cfg.max_model_len))
    )
    attention = get_backend("pallas", target_platform="tpu", tpu_generation=chip)
    static = StaticModel(graphdef, treedef, attention)
    token_bytes = kv_bytes_per_token(kv_cfg, kv_dtype)
    report = CheckReport(chip, model_name, engine_cfg.weights, str(kv_dtype), num_pages)
    for num_tokens, num_seqs in buckets or bucket_pairs(engine_cfg):
        inputs = jax.tree.map(placed, empty_inputs(engine_cfg, num_tokens, num_seqs))
        # The most KV a bucket touches: every sequence slot read at full length (capped at
        # the pool), and every token's new row written.
        kv_read = min(num_seqs * engine_cfg.max_model_len, num_pages * page_size) * token_bytes
        ideal = weight_bytes + kv_read + num_tokens * token_bytes
        base = dict(
            num_tokens=num_tokens,
            num_seqs=num_seqs,
            weight_bytes=weight_bytes,
            kv_pool_bytes=kv_pool_bytes,
            hbm_bytes=int(spec.hbm_bytes),
            ideal_bytes=float(ideal),
        )
        start = time.perf_counter()
        try:
            # Mosaic reads the target chip's parameters from the default device.
            with jax.default_device(device):
                compiled = engine_step.lower(static, False, weights, rope, caches, inputs).compile()
        except Exception as err:  # noqa: BLE001 - any compiler failure is the finding
            message = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
            if "RESOURCE_EXHAUSTED" in message:
                message = f"{_does_not_fit(base, None)} ({message})"
            report.buckets.append(
                BucketReport(
                    error=message,
                    compile_s=time.perf_counter() - start,
                    **base,
                )
            )
            continue
        compile_s = time.perf_counter() - start
        report.buckets.append(_inspect(compiled, compile_s, cache_shapes, base))
    return report


def _inspect(
    compiled: jax.stages.Compiled, compile_s: float, cache_shapes: set, base: dict[str, Any]
) -> BucketReport:
    memory = compiled.memory_analysis()
    total = (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        - memory.alias_size_in_bytes
        + memory.temp_size_in_bytes
        + memory.generated_code_size_in_bytes
    )
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    copies = count_full_copies(compiled.as_text(), cache_shapes)
    errors = []
    if total > base["hbm_bytes"]:
        errors.append(_does_not_fit(base, memory.temp_size_in_bytes, total))
    if copies:
        errors.append(f"{copies} full-KV-cache copies per step")
    return BucketReport(
        error="; ".join(errors) or None,
        compile_s=compile_s,
        argument_bytes=int(memory.argument_size_in_bytes),
        temp_bytes=int(memory.temp_size_in_bytes),
        total_bytes=int(total),
        full_cache_copies=copies,
        bytes_accessed=float(cost.get("bytes accessed", 0.0)),
        **base,
    )


def parse_buckets(text: str) -> list[tuple[int, int]]:
    """ "16x8,512x32" -> [(16, 8), (512, 32)] (tokens x sequences); ValueError otherwise."""
    pairs = []
    for item in text.split(","):
        tokens, sep, seqs = item.strip().partition("x")
        if not sep or not tokens.isdigit() or not seqs.isdigit() or int(seqs) > int(tokens):
            raise ValueError(f"bucket {item!r} is not TOKENSxSEQS with 1 <= SEQS <= TOKENS")
        pairs.append((int(tokens), int(seqs)))
    return pairs


def _does_not_fit(base: dict[str, Any], temp_bytes: int | None, total: int | None = None) -> str:
    """One line naming the sizes of a bucket that does not fit the chip's HBM."""
    needed = "" if total is None else f"{total / 1e9:.2f} GB needed: "
    temp = "" if temp_bytes is None else f", temporaries {temp_bytes / 1e9:.2f} GB"
    return (
        f"does not fit HBM: {needed}weights {base['weight_bytes'] / 1e9:.2f} GB, "
        f"KV pool {base['kv_pool_bytes'] / 1e9:.2f} GB{temp} > {base['hbm_bytes'] / 1e9:.1f} GB"
    )
