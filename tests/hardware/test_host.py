"""The host description benchmarks print and store: model, vector ISA flags, cores."""

from __future__ import annotations

import pytest

from claimbench.hardware import host

CPUINFO = """processor\t: 0
model name\t: AMD EPYC 9B14
flags\t\t: fpu sse2 avx fma avx2 avx512f avx512bw

processor\t: 1
model name\t: AMD EPYC 9B14
flags\t\t: fpu sse2 avx fma avx2 avx512f avx512bw
"""


def test_isa_flags_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO)
    assert host.isa_flags(cpuinfo) == ["avx512f", "avx2", "fma"]
    cpuinfo.write_text(CPUINFO.replace(" avx512f avx512bw", ""))
    assert host.isa_flags(cpuinfo) == ["avx2", "fma"]
    assert host.isa_flags(tmp_path / "missing") == []


def test_host_description_and_its_line():
    described = host.host_description()
    assert set(described) == {"cpu_model", "vector_isa", "isa_flags", "cores"}
    assert described["cores"] >= 1 and set(described["isa_flags"]) <= set(host.ISA_FLAGS)
    line = host.host_line(
        {"cpu_model": "AMD EPYC", "vector_isa": "avx2", "isa_flags": ["avx2", "fma"], "cores": 2}
    )
    assert line == "AMD EPYC, avx2 (avx2 fma), 2 cores"


def test_the_vector_isa_is_the_librarys_build(monkeypatch):
    # The default build (-march=native) is for this CPU: the two agree here; a build for
    # another -march says its own (tests/kernels/test_native_decode_march.py).
    from claimbench.kernels import native_attention

    if native_attention.unavailable_reason() is not None:
        pytest.skip(native_attention.unavailable_reason())
    assert native_attention.built_vector_isa() == native_attention.vector_isa()
    monkeypatch.setattr(native_attention, "built_vector_isa", lambda: "avx2-build")
    assert host.host_description()["vector_isa"] == "avx2-build"
