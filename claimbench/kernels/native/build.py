"""Compiling the native CPU kernels (C++ against XLA's FFI headers) on first use.

The shared library is built once per source, compiler and machine into
``$CLAIMBENCH_NATIVE_DIR`` (default ``~/.cache/claimbench/native``), written
under a temporary name and renamed into place, so concurrent first uses never
load a half-written file. ``CLAIMBENCH_NATIVE=0`` turns the native kernels off;
``CLAIMBENCH_NATIVE_MARCH`` replaces ``-march=native`` (``compile_flags``).
Failures are reported as ``NativeUnavailable`` with a one-line reason and the
engine falls back to its XLA path.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE_DIR = Path(__file__).parent
SOURCES = (
    "dense.cc",
    "fma_peak.cc",
    "greedy.cc",
    "paged_decode.cc",
    "paged_prefill.cc",
    "read_bandwidth.cc",
    "threads.cc",
    "vector_isa.cc",
)
HEADERS = (
    "decode_page_regs.h",
    "decode_tiles.h",
    "paged_kv.h",
    "parallel.h",
    "timed_shares.h",
    "vec_math.h",
)
FLAGS = (
    "-O3",
    "-march=native",
    "-std=c++17",
    "-shared",
    "-fPIC",
    "-fno-math-errno",
    "-fopenmp-simd",
)


MARCH_ENV = "CLAIMBENCH_NATIVE_MARCH"


def compile_flags() -> tuple[str, ...]:
    """FLAGS, with ``-march=$CLAIMBENCH_NATIVE_MARCH`` in place of ``-march=native`` when that
    is set: ``znver3`` (or ``x86-64-v3``) builds the AVX2 kernels on an AVX-512 host, so that
    both can be measured on one machine."""
    march = os.environ.get(MARCH_ENV)
    if not march:
        return FLAGS
    return tuple(f"-march={march}" if flag == "-march=native" else flag for flag in FLAGS)


class NativeUnavailable(RuntimeError):
    """The native kernels cannot be used here; the message says why, in one line."""


def _compiler() -> str:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return name
    raise NativeUnavailable("no C++ compiler found (set CXX or install g++)")


def _cpu_signature() -> str:
    """What -march=native depends on: the CPU's model and flags."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    lines = [ln for ln in info.splitlines() if ln.startswith(("model name", "flags"))]
    return "\n".join(sorted(set(lines)))


def cache_dir() -> Path:
    root = os.environ.get("CLAIMBENCH_NATIVE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "claimbench" / "native"


def library_path() -> Path:
    """The compiled library, building it if needed; raises NativeUnavailable."""
    if os.environ.get("CLAIMBENCH_NATIVE", "1") == "0":
        raise NativeUnavailable("turned off by CLAIMBENCH_NATIVE=0")
    import jax.ffi

    compiler = _compiler()
    include = jax.ffi.include_dir()
    key = hashlib.sha256()
    for name in SOURCES + HEADERS:
        key.update((SOURCE_DIR / name).read_bytes())
    flags = compile_flags()
    key.update(" ".join((compiler, *flags, include, _cpu_signature())).encode())
    target = cache_dir() / key.hexdigest()[:16] / "libclaimbench_native.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    sources = [str(SOURCE_DIR / name) for name in SOURCES]
    cmd = [compiler, *flags, f"-I{include}", *sources, "-o", tmp]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        Path(tmp).unlink(missing_ok=True)
        raise NativeUnavailable(f"compiling the native kernels failed: {e}") from e
    if proc.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr[:200])
        raise NativeUnavailable(f"compiling the native kernels failed: {first.strip()}")
    os.replace(tmp, target)
    return target


def load_library() -> ctypes.CDLL:
    """The built library, loaded (once per process: the loader keeps one handle per file);
    raises NativeUnavailable with a one-line reason."""
    import jax

    if jax.default_backend() != "cpu":
        raise NativeUnavailable(f"the native kernels run on CPU, not {jax.default_backend()}")
    path = library_path()
    try:
        return ctypes.cdll.LoadLibrary(str(path))
    except OSError as e:
        raise NativeUnavailable(f"loading the native kernels failed: {e}") from e


def main() -> int:
    """``python -m claimbench.kernels.native.build``: build now and say where, or why not."""
    try:
        print(f"native kernels: {library_path()}")
    except NativeUnavailable as e:
        print(f"native kernels unavailable ({e}); the XLA attention path will be used")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
