"""Attention by native CPU kernels (native/*.cc), and the "cpu" backend built on them.

XLA:CPU spends most of a decode step's attention copying: gathering each sequence's
pages, then transposing K and V for the batched dots; in prefill, its loops of small
dots run at a fraction of the machine. The native kernels walk each sequence's block
table and read K/V rows where they lie, split over XLA's intra-op threads: decode
streams every page once (it is bound by memory bandwidth), prefill tiles queries and
keys like a small GEMM (it is bound by arithmetic). Both are registered through
``jax.ffi`` and called inside the jitted step; their results match ``xla_decode`` and
``xla_prefill`` (tests/kernels/test_native_attention.py).

The "cpu" attention backend is ``xla_rpa.ragged_paged_attention`` (input checks and the KV
write in XLA) with the kernels plugged in; they fit its ``DecodeAttention`` and
``PrefillAttention`` contracts. Decode always takes the native kernel. Prefill takes it
where the CPU has vector multiply-add (AVX-512, or AVX2 with FMA; ``vector_isa``), its
tiles sized to the target's registers: when they were 16 lanes wide on every CPU, an
AVX2-only one (a 2-core AMD Zen 3) spilled them and ran the engine's prefill steps 2.6x
slower than ``xla_prefill``; sized to AVX2 they take 102 ms a 2,048-token step there
against XLA's 122-130. Elsewhere prefill stays in XLA (``prefill_path``;
``CLAIMBENCH_NATIVE_PREFILL=native|xla`` forces either). The kernels check the block tables
they are given (a page id outside the pool, a kv_len past the table's pages) and fail with
an error naming the values, since a C++ read, unlike XLA's gathers, is not clamped.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from claimbench.kernels import xla_prefill, xla_rpa
from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import AttentionMetadata
from claimbench.kernels.native.build import NativeUnavailable, load_library
from claimbench.kernels.paged_io import decode_lens

DECODE_TARGET = "claimbench_paged_decode"
PREFILL_TARGET = "claimbench_paged_prefill"
PREFILL_ENV = "CLAIMBENCH_NATIVE_PREFILL"
PREFILL_PATHS = ("native", "xla")


@functools.cache
def _register() -> str | None:
    """Build, load and register the kernels once; None when ready, else why not."""
    try:
        lib = load_library()
    except NativeUnavailable as e:
        return str(e)
    jax.ffi.register_ffi_target(DECODE_TARGET, jax.ffi.pycapsule(lib.ClaimbenchPagedDecode), "cpu")
    jax.ffi.register_ffi_target(
        PREFILL_TARGET, jax.ffi.pycapsule(lib.ClaimbenchPagedPrefill), "cpu"
    )
    return None


def unavailable_reason() -> str | None:
    """None when the native kernels can be used here, else a one-line reason."""
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
    call = jax.ffi.ffi_call(DECODE_TARGET, jax.ShapeDtypeStruct(q.shape, jnp.float32))
    out = call(
        q,
        cache.pages,
        _scales(cache),
        decode_lens(md, n).astype(jnp.int32),
        md.page_indices[:n].astype(jnp.int32),
        sm_scale=np.float32(sm_scale),
        soft_cap=np.float32(soft_cap or 0.0),
        sliding_window=np.int32(sliding_window or 0),
    )
    return out.reshape(qg.shape)


def _scales(cache: LayerKV) -> jax.Array:
    return (cache.scales if cache.scales is not None else jnp.zeros((1,), jnp.float32)).astype(
        jnp.float32
    )


def paged_prefill_attention(
    qg: jax.Array,
    cache: LayerKV,
    md: AttentionMetadata,
    dtype,
    sm_scale: float,
    sliding_window: int | None,
    soft_cap: float | None,
    out: jax.Array,
) -> jax.Array:
    """Same contract as ``xla_prefill.prefill_attention``: fills the rows of the prefill
    and mixed sequences of out f32[T, Hkv, G, D], the other rows passing through."""
    if (reason := _register()) is not None:
        raise NativeUnavailable(reason)
    num_tokens, num_kv_heads, group, head_dim = qg.shape
    shape = (num_tokens, num_kv_heads * group, head_dim)
    call = jax.ffi.ffi_call(
        PREFILL_TARGET,
        jax.ShapeDtypeStruct(shape, jnp.float32),
        input_output_aliases={7: 0},
    )
    seq_range = jnp.stack([md.distribution[0], md.num_seqs[0]]).astype(jnp.int32)
    result = call(
        qg.reshape(shape).astype(jnp.float32),
        cache.pages,
        _scales(cache),
        md.cu_q_lens.astype(jnp.int32),
        md.kv_lens.astype(jnp.int32),
        md.page_indices.astype(jnp.int32),
        seq_range,
        out.reshape(shape),
        sm_scale=np.float32(sm_scale),
        soft_cap=np.float32(soft_cap or 0.0),
        sliding_window=np.int32(sliding_window or 0),
    )
    return result.reshape(out.shape)


def prefill_path() -> str:
    """Which prefill attention the "cpu" backend traces: ``PREFILL_ENV`` if set, else
    "native" where the CPU has vector multiply-add (``vector_isa``) and "xla" elsewhere.
    ValueError names a bad value."""
    forced = os.environ.get(PREFILL_ENV)
    if forced:
        if forced not in PREFILL_PATHS:
            raise ValueError(f"{PREFILL_ENV}={forced!r}: expected one of {PREFILL_PATHS}")
        return forced
    return "native" if vector_isa() else "xla"


def read_cpu_flags(cpuinfo: Path) -> frozenset[str]:
    """The flags of ``cpuinfo``'s first "flags" line; empty where there is none."""
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        return frozenset()
    line = next((ln for ln in lines if ln.startswith("flags")), "")
    return frozenset(line.partition(":")[2].split())


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This host's CPU flags (/proc/cpuinfo, read once)."""
    return read_cpu_flags(Path("/proc/cpuinfo"))


def has_avx512() -> bool:
    return "avx512f" in cpu_flags()


def vector_isa() -> str | None:
    """The vector multiply-add the native kernels' tiles are sized for here: "avx512"
    (16-lane registers, 32 of them), "avx2" (with FMA: 8 lanes, 16 registers), or None."""
    if has_avx512():
        return "avx512"
    return "avx2" if {"avx2", "fma"} <= cpu_flags() else None


def built_vector_isa() -> str | None:
    """The vector width the native library here was compiled for ("avx512", "avx2" or None):
    what ``vector_isa`` says of the CPU, unless the library was built for another -march
    (``CLAIMBENCH_NATIVE_MARCH``). Without the library, ``vector_isa()``."""
    try:
        bits = load_library().ClaimbenchVectorBits()
    except NativeUnavailable:
        return vector_isa()
    return {512: "avx512", 256: "avx2"}.get(bits)


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
    prefill: str | None = None,
) -> tuple[jax.Array, LayerKV]:
    """``xla_rpa.ragged_paged_attention`` with the native kernels (the "cpu" backend):
    native decode, and the ``prefill`` path ("native" or "xla"; None: ``prefill_path()``)."""
    prefill = prefill or prefill_path()
    if prefill not in PREFILL_PATHS:
        raise ValueError(f"prefill={prefill!r}: expected one of {PREFILL_PATHS}")
    if cache.f16_bits:
        raise ValueError(
            "the native kernels read pages in their own dtype, not f16 bits in bf16 "
            "containers (the Pallas layout); allocate with attention_backend='cpu'"
        )
    return xla_rpa.ragged_paged_attention(
        q,
        k,
        v,
        cache,
        md,
        sm_scale=sm_scale,
        sliding_window=sliding_window,
        soft_cap=soft_cap,
        decode=paged_decode_attention,
        prefill=paged_prefill_attention if prefill == "native" else xla_prefill.prefill_attention,
    )
