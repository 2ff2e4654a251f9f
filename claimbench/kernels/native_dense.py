"""f32 matmuls by a native CPU kernel (native/dense.cc) on weights packed once, at load.

XLA:CPU's dot packs its weight operand into its own tile layout on every call, because
the weights are arguments of the jitted step, and runs the engine's decode shapes (64
rows against K of 256 or 768) well below the machine's multiply-add rate. ``pack`` lays a
weight [K, N] out once as column panels [ceil(N / PANEL), K, PANEL] (zero-padded), and
``dense`` multiplies by it in a register-tiled kernel split over XLA's intra-op threads.
Each output element is one multiply-add chain over k in order, so a row's result does
not depend on the rows beside it. ``reference`` is the same product in plain jnp, which
the tests compare against (tests/kernels/test_native_dense.py).

``pack_gated`` and ``dense_gated`` do a llama MLP's silu(x @ gate) * (x @ up) in one call:
the two weights packed together, each panel half gate and half up columns, the product's
epilogue applying silu and the multiply on the kernels' threads (XLA ran it as a fusion of
its own on one thread, 4% of a round on a Zen 5 host). ``gated_reference`` is that in jnp.
"""

from __future__ import annotations

import ctypes
import functools

import jax
import jax.numpy as jnp

from claimbench.kernels.native.build import NativeUnavailable, load_library

TARGET = "claimbench_dense"
GATED_TARGET = "claimbench_dense_gated"


@functools.cache
def _register() -> tuple[int | None, str | None]:
    """Build, load and register the kernel once: (panel width, None) or (None, why not)."""
    try:
        lib = load_library()
    except NativeUnavailable as e:
        return None, str(e)
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.ClaimbenchDense), "cpu")
    jax.ffi.register_ffi_target(GATED_TARGET, jax.ffi.pycapsule(lib.ClaimbenchDenseGated), "cpu")
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


def _call(name: str, target: str, x: jax.Array, packed: jax.Array, n: int, width: int):
    """The native call ``target`` on x f32[..., K] and panels [ceil(n / width), K, PANEL], where
    each panel gives ``width`` of the n output columns -> f32[..., n]; ValueError (naming
    ``name``) where the shapes disagree."""
    p, k, panel = packed.shape
    if panel != panel_width() or x.shape[-1] != k or p != -(-n // width):
        raise ValueError(
            f"{name}: x {x.shape} and packed weight {packed.shape} do not make [..., {n}]"
        )
    lead = x.shape[:-1]
    rows = x.reshape(-1, k).astype(jnp.float32)
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct((rows.shape[0], n), jnp.float32))
    return call(rows, packed.astype(jnp.float32)).reshape(*lead, n)


def dense(x: jax.Array, packed: jax.Array, n: int) -> jax.Array:
    """x f32[..., K] @ the packed weight of N = ``n`` columns -> f32[..., n]."""
    return _call("dense", TARGET, x, packed, n, panel_width())


def reference(x: jax.Array, packed: jax.Array, n: int) -> jax.Array:
    """``dense`` in plain jnp, at f32 accumulation."""
    w = unpack(packed, n)
    return jnp.matmul(x.astype(jnp.float32), w, precision=jax.lax.Precision.HIGHEST)


def pack_gated(gate: jax.Array, up: jax.Array) -> jax.Array:
    """f32 weights gate, up [K, N] -> panels f32[ceil(N / H), K, PANEL] (H = PANEL / 2): panel
    j holds gate columns [jH, jH + H) then the same up columns, the last zero-padded."""
    if gate.ndim != 2 or gate.shape != up.shape:
        raise ValueError(f"pack_gated needs two weights [K, N], got {gate.shape} and {up.shape}")
    half = panel_width() // 2
    k, n = gate.shape
    panels = -(-n // half)

    def halves(w: jax.Array) -> jax.Array:
        w = jnp.pad(w.astype(jnp.float32), ((0, 0), (0, panels * half - n)))
        return w.reshape(k, panels, half)

    return jnp.concatenate([halves(gate), halves(up)], axis=2).transpose(1, 0, 2)


def dense_gated(x: jax.Array, packed: jax.Array, n: int) -> jax.Array:
    """silu(x @ gate) * (x @ up) for x f32[..., K] and ``pack_gated``'s panels of N = ``n``
    columns -> f32[..., n]."""
    return _call("dense_gated", GATED_TARGET, x, packed, n, panel_width() // 2)


def gated_reference(x: jax.Array, gate: jax.Array, up: jax.Array) -> jax.Array:
    """``dense_gated`` in plain jnp, at f32 accumulation: silu(x @ gate) * (x @ up)."""
    x = x.astype(jnp.float32)
    hi = jax.lax.Precision.HIGHEST
    g = jnp.matmul(x, gate.astype(jnp.float32), precision=hi)
    return jax.nn.silu(g) * jnp.matmul(x, up.astype(jnp.float32), precision=hi)
