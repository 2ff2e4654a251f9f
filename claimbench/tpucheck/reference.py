"""bf16-not-fp16's layer-by-layer float32 reference (f32_reference.py) sized for a TPU chip.

The reference holds, at its peak, the windows' f32 hidden states twice (a layer's input and
output lists), two layers' f32 weights (the next is read before the last is dropped) and one
chunk's temporaries; or the hidden states beside the f32 embedding, or beside the final norm
and head with one window's logits. Its jitted layer and head calls are compiled for the chip
ahead of time (their temporaries are the compiler's); the rest is arithmetic on shapes.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import SingleDeviceSharding

from claimbench.hardware.chips import get_chip
from claimbench.lab.quality.f32_reference import (
    F32,
    WINDOWS_PER_CHUNK,
    WINDOWS_PER_HEAD,
    head_step,
    layer_step,
)
from claimbench.models.config import ModelConfig
from claimbench.models.moe import build_model
from claimbench.tpucompile.check import BucketReport, one_line_error, tpu_devices


def _nbytes(tree: object) -> int:
    return sum(
        int(np.prod(x.shape, dtype=np.int64)) * x.dtype.itemsize for x in jax.tree.leaves(tree)
    )


def check_reference(
    chip: str, model_cfg: ModelConfig, num_windows: int, window_len: int
) -> BucketReport:
    """The reference pass over ``num_windows`` windows of ``window_len`` tokens on one
    ``chip``: its peak HBM, the layer and head steps compiled for it."""
    device = tpu_devices(chip, 1)[0]
    sharding = SingleDeviceSharding(device)

    def placed(tree):
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree
        )

    model = nnx.eval_shape(lambda: build_model(model_cfg, dtype=F32, rngs=nnx.Rngs(0)))
    layer_def, layer_state = nnx.split(model.layers[0])
    norm_def, norm_state = nnx.split(model.norm)
    tied = model.lm_head is None
    head_def, head_state = nnx.split(model.embed_tokens if tied else model.lm_head)
    hidden = num_windows * window_len * model_cfg.hidden_size * 4
    layer_w, head_w = _nbytes(layer_state), _nbytes(norm_state) + _nbytes(head_state)
    embed_w = _nbytes(nnx.state(model.embed_tokens))
    chunk = jax.ShapeDtypeStruct(
        (WINDOWS_PER_CHUNK, window_len, model_cfg.hidden_size), F32, sharding=sharding
    )
    one = jax.ShapeDtypeStruct(
        (WINDOWS_PER_HEAD, window_len, model_cfg.hidden_size), F32, sharding=sharding
    )
    tokens = jax.ShapeDtypeStruct((WINDOWS_PER_HEAD, window_len), jnp.int32, sharding=sharding)
    hbm = int(get_chip(chip).hbm_bytes)
    base = dict(
        num_tokens=WINDOWS_PER_CHUNK * window_len,
        num_seqs=WINDOWS_PER_CHUNK,
        weight_bytes=2 * layer_w,
        kv_pool_bytes=0,
        hbm_bytes=hbm,
    )
    start = time.perf_counter()
    try:
        with jax.default_device(device), jax.default_matmul_precision("highest"):
            layer = layer_step.lower(layer_def, placed(layer_state), chunk).compile()
            head = head_step.lower(
                norm_def, head_def, tied, placed(norm_state), placed(head_state), one, tokens
            ).compile()
    except Exception as err:  # noqa: BLE001 - any compiler failure is the finding
        return BucketReport(
            error=one_line_error(err), compile_s=time.perf_counter() - start, **base
        )
    layer_temp = layer.memory_analysis().temp_size_in_bytes
    head_memory = head.memory_analysis()
    peak = max(
        hidden + embed_w,
        2 * hidden + 2 * layer_w + layer_temp,
        hidden + head_w + head_memory.temp_size_in_bytes + head_memory.output_size_in_bytes,
    )
    error = None
    if peak > hbm:
        error = (
            f"does not fit HBM: the f32 reference needs {peak / 1e9:.2f} GB "
            f"(hidden states {hidden / 1e9:.2f} GB, a layer {layer_w / 1e9:.2f} GB) "
            f"> {hbm / 1e9:.1f} GB"
        )
    return BucketReport(
        error=error,
        compile_s=time.perf_counter() - start,
        temp_bytes=int(max(layer_temp, head_memory.temp_size_in_bytes)),
        total_bytes=int(peak),
        **base,
    )
