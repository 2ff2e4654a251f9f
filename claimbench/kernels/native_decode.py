"""Decode attention by a native CPU kernel (native/paged_decode.cc), and the "cpu" backend.

XLA:CPU spends most of a decode step's attention copying: gathering each sequence's
pages, then transposing K and V for the batched dots. The native kernel walks each
sequence's block table and reads K/V rows where they lie, split over XLA's intra-op
threads. It is registered through ``jax.ffi`` and called inside the jitted step; its
result matches ``xla_decode.decode_attention`` (tests/test_native_decode.py).

The "cpu" attention backend is the XLA ragged paged attention with this decode.
"""

from __future__ import annotations

import ctypes
import functools

import jax
import jax.numpy as jnp
import numpy as np

from claimbench.kernels import reference
from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import AttentionMetadata
from claimbench.kernels.native.build import NativeUnavailable, library_path
from claimbench.kernels.paged_io import decode_lens

TARGET = "claimbench_paged_decode"


@functools.cache
def _register() -> str | None:
    """Build, load and register the kernel once; None when ready, else why not."""
    if jax.default_backend() != "cpu":
        return f"the native decode kernel runs on CPU, not {jax.default_backend()}"
    try:
        lib = ctypes.cdll.LoadLibrary(str(library_path()))
    except NativeUnavailable as e:
        return str(e)
    except OSError as e:
        return f"loading the native kernels failed: {e}"
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.ClaimbenchPagedDecode), "cpu")
    return None


def unavailable_reason() -> str | None:
    """None when the native decode kernel can be used here, else a one-line reason."""
    return _register()


def paged_decode_attention(
    qg: jax.Array,
    cache: LayerKV,
    md: AttentionMetadata,
    dtype,
    sm_scale: float,
    sliding_window: int | None,
    soft_cap: float | None,
) -> jax.Array:
    """Same contract as ``xla_decode.decode_attention``: f32[n, Hkv, G, D] for slots 0..n-1."""
    if (reason := _register()) is not None:
        raise NativeUnavailable(reason)
    n, num_kv_heads, group, head_dim = qg.shape
    q = qg.reshape(n, num_kv_heads * group, head_dim).astype(jnp.float32)
    scales = cache.scales if cache.scales is not None else jnp.zeros((1,), jnp.float32)
    call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct(q.shape, jnp.float32))
    out = call(
        q,
        cache.pages,
        scales.astype(jnp.float32),
        decode_lens(md, n).astype(jnp.int32),
        md.page_indices[:n].astype(jnp.int32),
        sm_scale=np.float32(sm_scale),
        soft_cap=np.float32(soft_cap or 0.0),
        sliding_window=np.int32(sliding_window or 0),
    )
    return out.reshape(qg.shape)


def ragged_paged_attention(
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
    """``reference.ragged_paged_attention`` with the native decode (the "cpu" backend)."""
    return reference.ragged_paged_attention(
        q,
        k,
        v,
        cache,
        md,
        sm_scale=sm_scale,
        sliding_window=sliding_window,
        soft_cap=soft_cap,
        decode=paged_decode_attention,
    )
