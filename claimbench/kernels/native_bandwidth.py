"""The host's read ceiling: a STREAM-like sum of floats by native code (native/read_bandwidth.cc).

Decode attention reads every KV row of a step once, so its speed is bounded by how fast the
host can read that many bytes. ``read_sum`` sums an f32 array on 1, 2, ... threads and says
how long the reads took. benchmarks/attention_kernel.py times it over as many bytes as a
decode step's KV, several buffers in turn (so each read comes from memory, as each layer of
the engine reads its own KV pool), and reports the decode kernel's bytes/s as a fraction of
it; ``last_level_cache_bytes`` tells it how many buffers that takes. ``read_pages`` reads a
pool's pages in a given order (a decode step's pages, sequence by sequence), each page front to
back with the next one prefetched, as the decode kernel does: the host's read rate for the
kernel's own access pattern, which on a host whose memory streams long runs faster than
scattered pages is below the contiguous one.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np

from claimbench.kernels.native.build import NativeUnavailable, load_library

# Where Linux describes the last cache level: index3 is the L3 on x86 and most ARM hosts.
L3_SIZE_FILE = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")
DEFAULT_L3_BYTES = 32 * 2**20  # when the host does not say


# The native reads' arguments (pointers, sizes, the thread count, where the seconds go); both
# return the sum as a double.
_SECONDS = ctypes.POINTER(ctypes.c_double)
_ARGTYPES = {
    "ClaimbenchReadSum": [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, _SECONDS],
    "ClaimbenchReadPages": [
        *(ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64),
        *(ctypes.c_int32, _SECONDS),
    ],
}


@functools.cache
def _native(name: str) -> ctypes._CFuncPtr:
    """The native library's read ``name`` (a key of _ARGTYPES), typed."""
    fn = getattr(load_library(), name)
    fn.restype = ctypes.c_double
    fn.argtypes = _ARGTYPES[name]
    return fn


def unavailable_reason() -> str | None:
    """None when the native read can be used here, else a one-line reason."""
    try:
        _native("ClaimbenchReadSum")
    except NativeUnavailable as e:
        return str(e)
    return None


def read_sum(data: np.ndarray, threads: int) -> tuple[float, float]:
    """(sum, seconds) of reading every element of f32[n] ``data`` once on ``threads`` threads.

    The sum is exact for values whose partial sums are exact in f32 lanes and a double total
    (small integers, say); it is returned so the reads cannot be optimised away."""
    if data.dtype != np.float32 or data.ndim != 1 or not data.flags.c_contiguous:
        raise ValueError(
            f"read_sum needs a contiguous f32[n] array, got {data.dtype}{list(data.shape)}"
        )
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    seconds = ctypes.c_double()
    read = _native("ClaimbenchReadSum")
    total = read(data.ctypes.data, data.size, threads, ctypes.byref(seconds))
    return float(total), seconds.value


def read_pages(pool: np.ndarray, pages: np.ndarray, threads: int) -> tuple[float, float]:
    """(sum, seconds) of reading the pages ``pool[pages[0]]``, ``pool[pages[1]]``, ... of the
    f32[num_pages, page_floats] ``pool`` in that order on ``threads`` threads, each thread a
    contiguous share of the list. A page listed twice is read twice."""
    if pool.dtype != np.float32 or pool.ndim != 2 or not pool.flags.c_contiguous:
        raise ValueError(
            f"read_pages needs a contiguous f32[num_pages, page_floats] pool, "
            f"got {pool.dtype}{list(pool.shape)}"
        )
    pages = np.ascontiguousarray(pages, np.int32)
    if pages.ndim != 1:
        raise ValueError(f"read_pages needs a 1-D list of page indices, got shape {pages.shape}")
    if pages.size and (pages.min() < 0 or pages.max() >= pool.shape[0]):
        raise ValueError(
            f"page indices must be in [0, {pool.shape[0]}), got {pages.min()}..{pages.max()}"
        )
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    seconds = ctypes.c_double()
    total = _native("ClaimbenchReadPages")(
        pool.ctypes.data, pool.shape[1], pages.ctypes.data, pages.size, threads,
        ctypes.byref(seconds),
    )  # fmt: skip
    return float(total), seconds.value


def last_level_cache_bytes() -> int:
    """The L3's size as Linux reports it ("32768K"), else DEFAULT_L3_BYTES."""
    try:
        text = L3_SIZE_FILE.read_text().strip()
    except OSError:
        return DEFAULT_L3_BYTES
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    scale = units.get(text[-1:].upper(), 1)
    digits = text[:-1] if text[-1:].upper() in units else text
    return int(digits) * scale if digits.isdigit() else DEFAULT_L3_BYTES
