"""The host CPU as a benchmark's report names it: model, vector ISA and cores.

A CPU measurement depends on the vector width the native kernels were built for and on how
many cores there are to share, so benchmarks print this beside their figures and store it
with them.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

# The cpuinfo flags that decide the native kernels' vector width (kernels.native_attention).
ISA_FLAGS = ("avx512f", "avx2", "fma")


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The host CPU's model name: /proc/cpuinfo's "model name", else platform.processor()."""
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor()


def isa_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """Which of ISA_FLAGS the host's first "flags" line lists; [] where there is none."""
    from claimbench.kernels.native_attention import read_cpu_flags  # imports JAX

    flags = read_cpu_flags(cpuinfo)
    return [flag for flag in ISA_FLAGS if flag in flags]


def host_description() -> dict[str, Any]:
    """cpu_model, vector_isa (what the native kernels here were built for: "avx512", "avx2" or
    None; an AVX-512 host's build for CLAIMBENCH_NATIVE_MARCH=znver3 says "avx2"), isa_flags
    (of ISA_FLAGS, the CPU's own) and cores (usable by this process)."""
    from claimbench.kernels.native_attention import built_vector_isa  # imports JAX

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return {
        "cpu_model": cpu_model(),
        "vector_isa": built_vector_isa(),
        "isa_flags": isa_flags(),
        "cores": cores,
    }


def host_line(host: dict[str, Any]) -> str:
    """``host_description()`` in one line: "AMD EPYC, avx512 (avx512f avx2 fma), 2 cores"."""
    flags = " ".join(host["isa_flags"]) or "no avx2/avx512f"
    isa = host["vector_isa"] or "no vector FMA"
    return f"{host['cpu_model']}, {isa} ({flags}), {host['cores']} cores"
