"""The host's compute ceiling: f32 multiply-adds on registers by native code (native/fma_peak.cc).

The dense kernel and prefill attention are bound by arithmetic, not by memory, so their
ceiling is the rate at which the cores multiply and add: ``fma_peak`` measures it on 1, 2, ...
threads (as many independent chains a thread as the dense kernel's register tile holds), and
the benchmarks report each kernel's FLOP/s as a fraction of it on as many threads.
"""

from __future__ import annotations

import ctypes
import functools
import statistics

from claimbench.kernels.native.build import load_library

_SECONDS = ctypes.POINTER(ctypes.c_double)


@functools.cache
def _peak() -> ctypes._CFuncPtr:
    fn = load_library().ClaimbenchFmaPeak
    fn.restype = ctypes.c_double
    fn.argtypes = [ctypes.c_int64, ctypes.c_int32, _SECONDS]
    return fn


@functools.cache
def flops_per_iteration() -> int:
    """FLOPs one thread does per iteration (two per multiply-add lane)."""
    fn = load_library().ClaimbenchFmaFlopsPerIter
    fn.restype = ctypes.c_int64
    return int(fn())


def run(iters: int, threads: int) -> tuple[float, float]:
    """(the chains' sum over every thread, seconds) of ``iters`` iterations on each of
    ``threads`` threads; the sum is returned so the work cannot be dropped."""
    if iters < 1 or threads < 1:
        raise ValueError(f"iterations and threads must be >= 1, got {iters} and {threads}")
    seconds = ctypes.c_double()
    total = _peak()(iters, threads, ctypes.byref(seconds))
    return float(total), seconds.value


def timed_iterations(iters: int, threads: int) -> float:
    """Seconds ``threads`` threads take to run ``iters`` iterations each."""
    return run(iters, threads)[1]


def fma_peak(threads: int, seconds: float = 0.05, repeats: int = 5) -> float:
    """The median FLOP/s of ``repeats`` runs on ``threads`` threads, each about ``seconds``
    long (the iterations sized from a short first run)."""
    iters = 100_000
    elapsed = timed_iterations(iters, threads)
    iters = max(1, int(iters * seconds / max(elapsed, 1e-6)))
    rates = [
        threads * iters * flops_per_iteration() / timed_iterations(iters, threads)
        for _ in range(repeats)
    ]
    return statistics.median(rates)
