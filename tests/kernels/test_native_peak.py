"""The host's multiply-add peak (kernels/native_peak.py): the work it times is the work it
counts, every multiply-add of it (a known answer), and bad arguments are refused."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from claimbench.kernels import native_dense, native_peak

pytestmark = pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None,
    reason="no C++ compiler: the native kernels cannot be built here",
)


def test_a_thread_does_a_register_vector_of_multiply_adds_per_chain():
    flops = native_peak.flops_per_iteration()
    lanes = 16 if native_dense.panel_width() == 32 else 8  # the dense kernel's register width
    chains = 24 if lanes == 16 else 12
    assert flops == 2 * chains * lanes


@pytest.mark.parametrize("iters, threads", [(10_000, 1), (10_000, 2), (30_000, 3)])
def test_every_multiply_add_runs(iters, threads):
    # Thread t's chain c starts at (1 + t)(c + 1) and steps x -> a x + b: after n steps
    # a^n x0 + b (1 - a^n) / (1 - a). A loop that skipped or folded steps would miss it.
    lanes = 16 if native_dense.panel_width() == 32 else 8
    chains = 24 if lanes == 16 else 12
    a = float(np.float32(0.999999))
    expected = 0.0
    for t in range(threads):
        b = float(np.float32(1e-7) * np.float32(1 + t))
        for c in range(chains):
            x0 = float(np.float32(1 + t) * np.float32(c + 1))
            expected += lanes * (a**iters * x0 + b * (1 - a**iters) / (1 - a))
    total, seconds = native_peak.run(iters, threads)
    # f32 steps drift from the exact sum by about 1e-5 a thousand steps; half the steps
    # missing would be 1.5% off at 30,000.
    assert total == pytest.approx(expected, rel=1e-3) and seconds > 0


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match=">= 1"):
        native_peak.timed_iterations(0, 1)
    with pytest.raises(ValueError, match=">= 1"):
        native_peak.timed_iterations(10, 0)
