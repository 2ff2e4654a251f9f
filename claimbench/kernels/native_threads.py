"""How many threads the native kernels compute on (native/parallel.h), read and set.

The kernels keep their own helper threads, one fewer than the cores this process may run on
(the calling thread works too), or ``CLAIMBENCH_NATIVE_THREADS`` in all when that is set. The
benchmarks time a kernel on one thread and on all of them in one process with ``threads``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from collections.abc import Iterator

from claimbench.kernels.native.build import load_library

THREADS_ENV = "CLAIMBENCH_NATIVE_THREADS"


_ARGTYPES = {
    "ClaimbenchKernelThreads": [],
    "ClaimbenchSetKernelThreads": [ctypes.c_int],
    "ClaimbenchThreadsSeen": [ctypes.c_int64, ctypes.c_int64],
    "ClaimbenchKernelWaitingSeconds": [],
}


@functools.cache
def _native(name: str) -> ctypes._CFuncPtr:
    fn = getattr(load_library(), name)
    fn.restype = ctypes.c_double if name == "ClaimbenchKernelWaitingSeconds" else ctypes.c_int
    fn.argtypes = _ARGTYPES[name]
    return fn


def kernel_threads() -> int:
    """Threads a native kernel call computes on now, the calling one included; raises
    NativeUnavailable when the library cannot be built or loaded here."""
    return _native("ClaimbenchKernelThreads")()


def set_kernel_threads(n: int) -> int:
    """Compute on ``n`` threads (at least 1) from the next call; the previous number."""
    if n < 1:
        raise ValueError(f"kernel threads must be at least 1, not {n}")
    return _native("ClaimbenchSetKernelThreads")(n)


def waiting_seconds() -> float:
    """Seconds the kernels' threads have spent spinning without work so far in this process (a
    helper between calls, a caller for a helper's last item): CPU time that computed nothing.
    A measure of idle cores taken from CPU time subtracts it."""
    return _native("ClaimbenchKernelWaitingSeconds")()


def threads_seen(items: int, item_us: int) -> int:
    """How many distinct threads ran ``items`` busy items of ``item_us`` microseconds each
    split as the kernels split theirs: whether the helpers take work."""
    return _native("ClaimbenchThreadsSeen")(items, item_us)


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """The native kernels on ``n`` threads inside the block, as before after it."""
    previous = set_kernel_threads(n)
    try:
        yield
    finally:
        set_kernel_threads(previous)
