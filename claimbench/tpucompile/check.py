"""Compile the engine's whole step for a TPU on a host without one (libtpu ahead of time).

libtpu can describe a TPU topology and compile for it on any host: the step is lowered
with every argument given as a ShapeDtypeStruct placed on devices of that topology (one,
or a tp-way slice: target.py; no weights are read, so a 7B model needs no download and
no memory), with the Pallas attention kernel compiled, not interpreted. Per (token,
sequence) bucket it reports whether Mosaic and XLA compile it, how long that takes, what
the executable needs in one chip's HBM against its capacity, how many whole-KV-array
copies XLA inserted (each one moves a layer's entire cache every step), the collectives a
sharded step runs, and the compiler's bytes accessed over the bytes an ideal step moves.
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

from claimbench.engine.config import EngineConfig
from claimbench.engine.worker.batch import empty_inputs
from claimbench.engine.worker.buckets import bucket_pairs
from claimbench.hardware.chips import get_chip
from claimbench.hardware.model_presets import TINY_NAME, get_preset, model_config
from claimbench.models.checkpoint import default_moe_path, read_config
from claimbench.models.config import ModelConfig
from claimbench.tpucompile.hlo_collectives import count_collectives
from claimbench.tpucompile.hlo_copies import count_full_copies
from claimbench.tpucompile.target import build_target

TPU_CHIPS = ("v5e", "v6e")
PROFILES = ("quick", "full")
MOE_NAME = "claimbench-tiny-moe"
# The topology libtpu is asked for: its smallest host-sized slice (4 chips); tp of them used.
_TOPOLOGY = {"v5e": "v5e:2x2", "v6e": "v6e:2x2"}
SLICE_CHIPS = 4
# The full profile's model where claims.yaml pins no preset (tpucheck.setup checks the pinned
# one, qwen2.5-7b-instruct today): the series' Llama-3.1-8B layout, as shapes only.
FULL_MODEL = "llama-3.1-8b"
# The full profile's engine: the claims' full-profile serving shape, with a KV pool that
# leaves a v6e room for bf16 weights (16 GB) and the step's temporaries.
FULL_ENGINE = EngineConfig(
    max_num_seqs=32, max_num_batched_tokens=512, max_model_len=1024, kv_pool_bytes=8 * 2**30
)


@dataclass(frozen=True)
class BucketReport:
    """One compiled (or failed) bucket. Bytes are one device's, padding included."""

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
    # Per device, per step: {"all-reduce": {"count": n, "bytes": b}, ...} (empty at tp=1).
    collectives: dict[str, dict[str, int]] = field(default_factory=dict)
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
    num_pages: int  # per device
    buckets: list[BucketReport] = field(default_factory=list)
    tp: int = 1  # devices the step is split over; every size is one device's

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


def tpu_devices(chip: str, tp: int = 1) -> list[jax.Device]:
    """``tp`` devices of a ``chip`` topology that libtpu describes without the chip here."""
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
    if not 1 <= tp <= len(topology.devices):
        raise ValueError(
            f"tp={tp} is not between 1 and the {len(topology.devices)} chips of {_TOPOLOGY[chip]}"
        )
    return list(topology.devices[:tp])


def _tpu_vm() -> bool:
    """Whether this host has TPU chips attached (their device nodes), without starting JAX."""
    return bool(glob.glob("/dev/accel*")) or os.path.isdir("/dev/vfio")


def resolve_model(name: str) -> tuple[str, ModelConfig]:
    """A model given by name: "claimbench-tiny" or "claimbench-tiny-moe" (shipped), a
    preset, or a local HF directory (its config.json only)."""
    if name == TINY_NAME:
        from claimbench.models.checkpoint import default_model_path

        return name, read_config(default_model_path())
    if name == MOE_NAME:
        return name, read_config(default_moe_path())
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
    devices: list[jax.Device] | None = None,
) -> CheckReport:
    """Compile the engine step for ``chip`` at ``buckets`` (default: every bucket pair),
    over ``engine_cfg.tp`` devices of its topology (or ``devices``). Sizes are per device."""
    spec = get_chip(chip)
    devices = devices or tpu_devices(chip, engine_cfg.parallel.tp)
    target = build_target(chip, model_cfg, engine_cfg, devices)
    report = CheckReport(
        chip, model_name, engine_cfg.model.weights, target.kv_dtype, target.num_pages, tp=target.tp
    )
    page_size = engine_cfg.cache.page_size
    for num_tokens, num_seqs in buckets or bucket_pairs(engine_cfg):
        inputs = jax.tree.map(target.placed, empty_inputs(engine_cfg, num_tokens, num_seqs))
        # The most KV a bucket touches: every sequence slot read at full length (capped at
        # the pool), and every token's new row written.
        kv_read = min(num_seqs * engine_cfg.scheduler.max_model_len, target.num_pages * page_size)
        ideal = target.weight_bytes + (kv_read + num_tokens) * target.kv_token_bytes
        base = dict(
            num_tokens=num_tokens,
            num_seqs=num_seqs,
            weight_bytes=target.weight_bytes,
            kv_pool_bytes=target.kv_pool_bytes,
            hbm_bytes=int(spec.hbm_bytes),
            ideal_bytes=float(ideal),
        )
        start = time.perf_counter()
        try:
            # Mosaic reads the target chip's parameters from the default device.
            with jax.default_device(target.device):
                lowered = target.step.lower(
                    target.static, False, target.weights, target.rope, target.caches, inputs
                )
                compiled = lowered.compile()
        except Exception as err:  # noqa: BLE001 - any compiler failure is the finding
            message = one_line_error(err)
            if "RESOURCE_EXHAUSTED" in message:
                message = f"{_does_not_fit(base, None)} ({message})"
            report.buckets.append(
                BucketReport(error=message, compile_s=time.perf_counter() - start, **base)
            )
            continue
        compile_s = time.perf_counter() - start
        report.buckets.append(_inspect(compiled, compile_s, target.cache_shapes, base))
    return report


def one_line_error(err: BaseException) -> str:
    """A compiler's (often multi-line) error as one line: its type and first 300 characters."""
    return f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"


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
    hlo = compiled.as_text()
    copies = count_full_copies(hlo, cache_shapes)
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
        collectives=count_collectives(hlo),
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
