"""f32 matmuls by a native CPU kernel (native/dense.cc) on weights packed once, at load.

XLA:CPU's dot packs its weight operand into its own tile layout on every call, because
the weights are arguments of the jitted step, and runs the engine's decode shapes (64
rows against K of 256 or 768) well below the machine's multiply-add rate. ``pack`` lays a
weight [K, N] out once as column panels [ceil(N / PANEL), K, PANEL] (zero-padded), and
``dense`` multiplies by it in a register-tiled kernel split over XLA's intra-op threads.
Each output element is one multiply-add chain over k in order, so a row's result does
not depend on the rows beside it. ``reference`` is the same product in plain jnp, which
the tests compare against (tests/kernels/test_native_dense.py).
"""

from __future__ import annotations

import ctypes
import functools

import jax
import jax.numpy as jnp

from claimbench.kernels.native.build import NativeUnavailable, load_library

TARGET = "claimbench_dense"


@functools.cache
def _register() -> tuple[int | None, str | None]:
    """Build, load and register the kernel once: (panel width, None) or (None, why not)."""
    try:
        lib = load_library()
    except NativeUnavailable as e:
        return None, str(e)
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.ClaimbenchDense), "cpu")
    lib.ClaimbenchDensePanel.restype = ctypes.c_int64
    return int(lib.ClaimbenchDensePanel()), None


def unavailable_reason() -> str | None:
    """None when the kernel can be used here, else a one-line reason."""
    return _register()[1]


def panel_width() -> int:
    panel, reason = _register()
    if panel is None:
        raise NativeUnavailable(reason)
    return panel


def pack(w: jax.Array) -> jax.Array:
    """f32 weight [K, N] -> panels f32[ceil(N / PANEL), K, PANEL], the last zero-padded."""
    if w.ndim != 2:
        raise ValueError(f"pack needs a weight [K, N], got shape {w.shape}")
    panel = panel_width()
    k, n = w.shape
    panels = -(-n // panel)
    w = jnp.pad(w.astype(jnp.float32), ((0, 0), (0, panels * panel - n)))
    return w.reshape(k, panels, panel).transpose(1, 0, 2)


def unpack(packed: jax.Array, n: int) -> jax.Array:
    """The inverse of ``pack``: panels [P, K, PANEL] -> weight [K, n]."""
    p, k, panel = packed.shape
    return packed.transpose(1, 0, 2).reshape(k, p * panel)[:, :n]


def dense(x: jax.Array, packed: jax.Array, n: int) -> jax.Array:
    """x f32[..., K] @ the packed weight of N = ``n`` columns -> f32[..., n]."""
    panel = panel_width()
    p, k, width = packed.shape
    if width != panel or x.shape[-1] != k or p != -(-n // panel):
        raise ValueError(
            f"dense: x {x.shape} and packed weight {packed.shape} do not make [..., {n}]"
        )
    lead = x.shape[:-1]
    rows = x.reshape(-1, k).astype(jnp.float32)
    call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct((rows.shape[0], n), jnp.float32))
    return call(rows, packed.astype(jnp.float32)).reshape(*lead, n)


def reference(x: jax.Array, packed: jax.Array, n: int) -> jax.Array:
    """``dense`` in plain jnp, at f32 accumulation."""
    w = unpack(packed, n)
    return jnp.matmul(x.astype(jnp.float32), w, precision=jax.lax.Precision.HIGHEST)
