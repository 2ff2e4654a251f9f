"""The engine step's arguments as shapes placed on a described TPU topology's devices.

No weights are read and nothing is allocated: every argument is a ShapeDtypeStruct with a
sharding over devices libtpu describes, so the engine's own jitted step lowers and compiles
for a chip (or a tp-way slice of chips) this host does not have. tp=1 places everything on
one device and uses the unsharded step; tp > 1 builds what ``ModelRunner`` builds over a
mesh (sharding.py's table for the weights, the pool split over KV heads, attention under
``shard_map``) and uses the sharded step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from claimbench.engine.config import EngineConfig
from claimbench.engine.kv.kv_cache import (
    allocate_kv_cache,
    kv_bytes_per_token,
    num_pages_for_pool,
    page_layout,
    resolve_kv_dtype,
)

# The engine's jitted steps themselves (not copies of them) are what must compile.
from claimbench.engine.worker.runner import StaticModel
from claimbench.engine.worker.runner import _sharded_step as sharded_step
from claimbench.engine.worker.runner import _step as unsharded_step
from claimbench.engine.worker.sharding import (
    REPLICATED,
    TP,
    ShardedAttention,
    TensorParallel,
    cache_spec,
    check_tp,
    kv_replicas,
    replicate_kv_heads,
    weight_specs,
)
from claimbench.kernels.backend import get_backend
from claimbench.models.config import ModelConfig
from claimbench.models.llama import Rope, rope_table
from claimbench.models.moe import build_model
from claimbench.models.quantize import quantize_weights
from claimbench.tpucompile.hlo_copies import Shape, hlo_shape


@dataclass(frozen=True)
class StepTarget:
    """Everything one compile of the step needs, and the per-device sizes it is judged by."""

    step: Any  # the engine's jitted step (unsharded, or sharded for this layout)
    static: StaticModel
    weights: list[jax.ShapeDtypeStruct]  # global shapes, each with its sharding
    rope: Rope
    caches: list[Any]  # LayerKV of global shapes, each with its sharding
    replicated: jax.sharding.Sharding  # where the step's inputs go
    device: jax.Device  # the first device: Mosaic reads the target chip from it
    tp: int
    kv_dtype: str
    num_pages: int  # pages per device (each holds a whole pool of its own KV heads)
    weight_bytes: int  # per device: the weights as given (quantized values and scales)
    kv_pool_bytes: int  # per device
    kv_token_bytes: int  # per device: one token's K and V over all layers
    cache_shapes: frozenset[Shape]  # one device's cache arrays, as the partitioned HLO has them

    def placed(self, x: Any) -> jax.ShapeDtypeStruct:
        """A step input (replicated) as a placed shape."""
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=self.replicated)


def build_target(
    chip: str, model_cfg: ModelConfig, engine_cfg: EngineConfig, devices: list[jax.Device]
) -> StepTarget:
    """The step's arguments for ``model_cfg`` served at ``engine_cfg`` over ``devices``
    (``len(devices)`` is the tp degree; ValueError, one line, if it cannot split the model)."""
    tp = len(devices)
    check_tp(tp, model_cfg.num_heads, model_cfg.num_kv_heads, tp)
    replicas = kv_replicas(tp, model_cfg.num_kv_heads)
    dtype = jnp.dtype(engine_cfg.model.dtype)

    def build() -> nnx.Module:
        # The engine's order: quantize (build_engine), then replicate KV heads (runner).
        model = build_model(model_cfg, dtype=dtype, rngs=nnx.Rngs(0))
        return replicate_kv_heads(quantize_weights(model, engine_cfg.model.weights), replicas)

    abstract = nnx.eval_shape(build)
    graphdef, state = nnx.split(abstract)
    leaves, treedef = jax.tree.flatten(state)
    kv_dtype = resolve_kv_dtype(engine_cfg.cache.kv_dtype, engine_cfg.model.dtype)
    # The pool as the runner lays it out for the Pallas kernel, sized per device.
    kv_cfg = page_layout(abstract.cfg, "pallas")
    attention = get_backend("pallas", target_platform="tpu", tpu_generation=chip)
    if tp == 1:
        mesh = None
        local_cfg = kv_cfg
        replicated = SingleDeviceSharding(devices[0])
        weight_shardings = [replicated] * len(leaves)
    else:
        mesh = Mesh(np.asarray(devices), (TP,))
        parallel = TensorParallel(mesh, model_cfg.num_kv_heads, replicas)
        local_cfg = parallel.local_layout(kv_cfg)
        replicated = NamedSharding(mesh, REPLICATED)
        weight_shardings = [NamedSharding(mesh, s) for s in weight_specs(state, tp)]
        attention = ShardedAttention(attention, mesh)
    num_pages = num_pages_for_pool(
        local_cfg, kv_dtype, engine_cfg.cache.page_size, engine_cfg.cache.kv_pool_bytes
    )
    local = jax.eval_shape(
        lambda: allocate_kv_cache(
            local_cfg, num_pages, engine_cfg.cache.page_size, kv_dtype, attention_backend="pallas"
        )
    )
    if mesh is None:
        cache_shardings = [jax.tree.map(lambda _: replicated, c) for c in local]
    else:
        cache_shardings = [
            jax.tree.map(lambda s: NamedSharding(mesh, s), cache_spec(c), is_leaf=_is_spec)
            for c in local
        ]
    caches = [
        jax.tree.map(partial_global(tp), c, s) for c, s in zip(local, cache_shardings, strict=True)
    ]
    weights = [
        jax.ShapeDtypeStruct(w.shape, w.dtype, sharding=s)
        for w, s in zip(leaves, weight_shardings, strict=True)
    ]
    rope = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
        jax.eval_shape(lambda: rope_table(model_cfg, engine_cfg.scheduler.max_model_len)),
    )
    if mesh is None:
        step = unsharded_step
    else:
        step = sharded_step(tuple(weight_shardings), tuple(cache_shardings), replicated)
    local_leaves = jax.tree.leaves(local)
    # The pages and int8's per-row scales grow with the pool; fp8's two per-layer scales
    # are scalars the kernel reads from SMEM, and moving them costs nothing.
    cache_shapes = frozenset(hlo_shape(c.dtype.name, c.shape) for c in local_leaves if c.ndim >= 2)
    return StepTarget(
        step=step,
        static=StaticModel(graphdef, treedef, attention),
        weights=weights,
        rope=rope,
        caches=caches,
        replicated=replicated,
        device=devices[0],
        tp=tp,
        kv_dtype=str(kv_dtype),
        num_pages=num_pages,
        weight_bytes=sum(_shard_bytes(w) for w in weights),
        kv_pool_bytes=sum(int(c.size) * c.dtype.itemsize for c in local_leaves),
        kv_token_bytes=kv_bytes_per_token(local_cfg, kv_dtype),
        cache_shapes=cache_shapes,
    )


def partial_global(tp: int):
    """local shape + its sharding -> the global ShapeDtypeStruct: each axis the sharding
    splits over the mesh is ``tp`` times one device's."""

    def to_global(local: jax.ShapeDtypeStruct, sharding: jax.sharding.Sharding):
        spec = getattr(sharding, "spec", PartitionSpec())
        names = tuple(spec) + (None,) * (len(local.shape) - len(spec))
        shape = tuple(d * tp if n == TP else d for d, n in zip(local.shape, names, strict=True))
        return jax.ShapeDtypeStruct(shape, local.dtype, sharding=sharding)

    return to_global


def _shard_bytes(x: jax.ShapeDtypeStruct) -> int:
    """Bytes of one device's shard of a placed shape."""
    shape = x.sharding.shard_shape(x.shape)
    return int(np.prod(shape, dtype=np.int64)) * x.dtype.itemsize


def _is_spec(x: object) -> bool:
    return isinstance(x, PartitionSpec)
