"""Tensor parallelism: a mesh over ``tp`` devices and one table of partition specs.

Megatron-style, as jax-llm-examples' llama3 ``ShardingRules``: q, k, v, gate and up are split
on their output (heads, MLP columns), o and down on their input, so each layer all-reduces its
activations twice and nothing else crosses devices. The token-embedding table and the norms
are replicated; an untied ``lm_head`` is split over the vocabulary when tp divides it.

The KV cache is split over KV heads: pages [num_pages, page_size, 2 * num_kv_heads, head_dim]
hold K and V interleaved on the head axis (row 2h = K of head h, 2h + 1 = V), so a contiguous
split of that axis gives each device whole (K, V) pairs; int8's per-row scales split alike,
fp8's two tensor scales are replicated. When a model has fewer KV heads than devices, each KV
head is replicated tp // num_kv_heads times at load (k_proj / v_proj columns copied), as
tpu-inference does: every device then holds the one KV head its query heads read.

Attention runs under ``jax.shard_map`` over heads for every backend, since automatic
partitioning splits neither a Pallas call nor an FFI custom call; each device attends its
own heads over its own slice of the pages, with the step's metadata replicated.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from claimbench.kernels.backend import AttentionBackend
from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import AttentionMetadata
from claimbench.models.config import ModelConfig

TP = "tp"  # the mesh's one axis
HEADS = P(None, TP, None)  # q / k / v / attention output f[T, heads, head_dim]
PAGES = P(None, None, TP, None)  # pages [num_pages, page_size, 2 * kv_heads, head_dim]
ROW_SCALES = P(None, None, TP)  # int8 scales f32[num_pages, page_size, 2 * kv_heads]
PAGE_SCALES = P(None, TP)  # int8 scales f32[num_pages, lanes]: each device's rows, side by side
REPLICATED = P()

# Parameter path (its keys joined by "/", e.g. "layers/3/self_attn/q_proj/kernel") -> spec;
# the first pattern that matches wins. Quantized linears (models/quantize.py) hold ``qvalue``
# [in, out] and ``scale`` f32[out] in place of ``kernel``: each follows its output axis.
SHARDING_RULES: tuple[tuple[str, P], ...] = (
    (r"(q|k|v|gate|up)_proj/(kernel|qvalue)$", P(None, TP)),  # column-parallel [in, out]
    (r"(q|k|v|gate|up)_proj/(bias|scale)$", P(TP)),  # [out], split with the columns
    (r"(o|down)_proj/(kernel|qvalue)$", P(TP, None)),  # row-parallel [in, out]
    (r"lm_head/(kernel|qvalue)$", P(None, TP)),  # vocab-split head [hidden, vocab]
    (r"lm_head/scale$", P(TP)),  # f32[vocab]
    # Everything else is replicated: embedding table, norms, o/down biases and scales (added
    # after the all-reduce, once).
    (r".*", REPLICATED),
)


def kv_replicas(tp: int, num_kv_heads: int) -> int:
    """Copies of each KV head a tp-way split needs: 1 when tp divides the KV heads,
    tp // num_kv_heads when there are fewer KV heads than devices."""
    return tp // num_kv_heads if num_kv_heads < tp else 1


def check_tp(tp: int, num_heads: int, num_kv_heads: int, num_devices: int) -> None:
    """ValueError (one line, naming the values) unless ``tp`` can split this model here."""
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    if tp > num_devices:
        raise ValueError(f"tp={tp} exceeds the {num_devices} devices present")
    if num_heads % tp:
        raise ValueError(f"tp={tp} does not divide the model's {num_heads} query heads")
    if num_kv_heads < tp and tp % num_kv_heads:
        raise ValueError(
            f"tp={tp} divides neither the model's {num_kv_heads} KV heads nor, replicated, "
            f"a whole number of copies of them"
        )
    if num_kv_heads >= tp and num_kv_heads % tp:
        raise ValueError(f"tp={tp} does not divide the model's {num_kv_heads} KV heads")


def check_model_tp(tp: int, cfg: ModelConfig) -> None:
    """``check_tp`` for a model on the devices this process sees."""
    check_tp(tp, cfg.num_heads, cfg.num_kv_heads, len(jax.devices()))


def make_mesh(tp: int) -> Mesh:
    """A 1-D mesh over the first ``tp`` devices, axis ``TP``."""
    devices = jax.devices()
    if tp > len(devices):
        raise ValueError(f"tp={tp} exceeds the {len(devices)} devices present")
    return Mesh(np.asarray(devices[:tp]), (TP,))


def param_spec(path: str, shape: tuple[int, ...], tp: int) -> P:
    """The table's spec for a parameter, replicated where tp does not divide a split axis
    (a vocabulary of 97 over 4 devices, say)."""
    spec = next(spec for pattern, spec in SHARDING_RULES if re.search(pattern, path))
    for axis, name in enumerate(spec):
        if name is not None and shape[axis] % tp:
            return REPLICATED
    return spec


def key_path(path: tuple[Any, ...]) -> str:
    """An ``nnx.State`` leaf's key path -> "layers/3/self_attn/q_proj/kernel" (the module
    keys; the Variable's trailing ``.value`` attribute is not part of the name)."""
    parts = []
    for key in path:
        if isinstance(key, jax.tree_util.DictKey):
            parts.append(str(key.key))
        elif isinstance(key, jax.tree_util.SequenceKey):
            parts.append(str(key.idx))
    return "/".join(parts)


def weight_specs(state: nnx.State, tp: int) -> list[P]:
    """One spec per leaf of ``state``, in ``jax.tree.flatten`` order."""
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    return [param_spec(key_path(path), leaf.shape, tp) for path, leaf in leaves]


def replicate_kv_heads(model: nnx.Module, replicas: int) -> nnx.Module:
    """A copy of ``model`` whose every KV head appears ``replicas`` times in a row (head h
    becomes heads h * replicas .. h * replicas + replicas - 1), so grouped-query attention
    maps each query head to a copy of its own KV head; ``model`` itself is left alone."""
    if replicas == 1:
        return model
    copy = nnx.clone(model)
    cfg: ModelConfig = copy.cfg
    new_cfg = dataclasses.replace(cfg, num_kv_heads=cfg.num_kv_heads * replicas)
    repeat = partial(_repeat_heads, num_heads=cfg.num_kv_heads, replicas=replicas)
    for layer in copy.layers:
        attn = layer.self_attn
        for proj in (attn.k_proj, attn.v_proj):
            for name in ("kernel", "qvalue", "bias", "scale"):
                param = getattr(proj, name, None)
                if isinstance(param, nnx.Variable):
                    param.set_value(repeat(param.get_value()))
        attn.num_kv_heads, attn.cfg = new_cfg.num_kv_heads, new_cfg
    copy.cfg = new_cfg
    return copy


def _repeat_heads(x: jax.Array, num_heads: int, replicas: int) -> jax.Array:
    """[..., num_heads * D] -> [..., num_heads * replicas * D], each head's D columns repeated."""
    lead, width = x.shape[:-1], x.shape[-1]
    heads = x.reshape(*lead, num_heads, width // num_heads)
    return jnp.repeat(heads, replicas, axis=-2).reshape(*lead, width * replicas)


def cache_spec(cache: LayerKV) -> LayerKV:
    """The specs of one layer's cache: pages over KV heads; int8 scales split alike, as
    [num_pages, page_size, 2 * kv_heads] rows or as one row of lanes per page (each device's
    share its own rows, side by side); fp8's tensor scales f32[2] replicated."""
    if cache.scales is None:
        return LayerKV(PAGES, None, cache.f16_bits)
    specs = {3: ROW_SCALES, 2: PAGE_SCALES, 1: REPLICATED}
    return LayerKV(PAGES, specs[cache.scales.ndim], cache.f16_bits)


@dataclass(frozen=True)
class ShardedAttention:
    """An attention backend run per device over its own heads (``jax.shard_map``).

    q f[T, Hq, D] and k, v f[T, Hkv, D] arrive split on the head axis; each device sees
    Hq / tp query heads, Hkv / tp KV heads and its slice of the pages, so grouped-query
    attention maps local query head j to local KV head j // (Hq / Hkv) as it does globally.
    Frozen, so equal meshes and backends hash equal (the step's static argument)."""

    attention: AttentionBackend
    mesh: Mesh

    def __call__(
        self,
        q: jax.Array,
        k: jax.Array,
        v: jax.Array,
        cache: LayerKV,
        md: AttentionMetadata,
        *,
        sm_scale: float,
        sliding_window: int | None = None,
        soft_cap: float | None = None,
    ) -> tuple[jax.Array, LayerKV]:
        attend = partial(
            self.attention, sm_scale=sm_scale, sliding_window=sliding_window, soft_cap=soft_cap
        )
        spec = cache_spec(cache)
        return jax.shard_map(
            attend,
            mesh=self.mesh,
            in_specs=(HEADS, HEADS, HEADS, spec, REPLICATED),
            out_specs=(HEADS, spec),
            # Pallas and FFI calls carry no varying-axis types to check.
            check_vma=False,
        )(q, k, v, cache, md)


@dataclass(frozen=True)
class TensorParallel:
    """How one engine's model and cache sit on its devices."""

    mesh: Mesh
    num_kv_heads: int  # the model's own KV heads
    kv_replicas: int  # copies of each KV head held (1 unless num_kv_heads < tp)

    @property
    def tp(self) -> int:
        return self.mesh.size

    @classmethod
    def build(cls, tp: int, cfg: ModelConfig) -> TensorParallel:
        """Check ``tp`` against the model and the devices present (ValueError) and make the
        mesh."""
        check_model_tp(tp, cfg)
        return cls(make_mesh(tp), cfg.num_kv_heads, kv_replicas(tp, cfg.num_kv_heads))

    def named(self, spec: P) -> NamedSharding:
        return NamedSharding(self.mesh, spec)

    def local_layout(self, kv_cfg: ModelConfig) -> ModelConfig:
        """The pages' layout one device holds: its share of the (replicated) KV heads."""
        return dataclasses.replace(kv_cfg, num_kv_heads=kv_cfg.num_kv_heads // self.tp)

    def describe(self) -> dict[str, Any]:
        """The mesh and the KV-head split, for ``LLMEngine.describe()``."""
        held = self.num_kv_heads * self.kv_replicas
        note = (
            f"{self.num_kv_heads} KV head(s) < tp={self.tp}: each KV head replicated "
            f"{self.kv_replicas}x, one per device"
            if self.kv_replicas > 1
            else f"{held // self.tp} of {held} KV heads per device"
        )
        return {
            "tp": self.tp,
            "devices": [str(d) for d in self.mesh.devices.flat],
            "num_kv_heads": self.num_kv_heads,
            "kv_replicas": self.kv_replicas,
            "kv_heads_per_device": held // self.tp,
            "kv_heads": note,
        }


def device_bytes(arrays: Any, device: jax.Device) -> int:
    """Bytes of ``arrays``' shards that live on ``device``."""
    total = 0
    for leaf in jax.tree.leaves(arrays):
        total += sum(int(s.data.nbytes) for s in leaf.addressable_shards if s.device == device)
    return total
