"""bf16-not-fp16's layer-by-layer float32 reference sized for a TPU chip ahead of time."""

from __future__ import annotations

import pytest

from claimbench.tpucheck.reference import check_reference
from claimbench.tpucompile import check as tpu_check

pytestmark = pytest.mark.skipif(
    tpu_check.libtpu_unavailable() is not None, reason="libtpu not installed"
)
# Short windows: the peak's terms are the same at any length, and the layer and head steps
# compile for the chip in well under half the time of bf16-not-fp16's 256-token windows. The
# hidden states (0.5 MB at 8 windows) still outweigh a layer step's temporaries, so a peak
# that held them once, or one layer's weights, would fall under the bound the test asserts.
WINDOW_LEN = 64


@pytest.mark.slow
def test_the_reference_peak_holds_two_hidden_copies_and_two_layers_and_can_overflow() -> None:
    _, cfg = tpu_check.resolve_model("claimbench-tiny")
    fits = check_reference("v5e", cfg, 8, WINDOW_LEN)
    hidden = 8 * WINDOW_LEN * cfg.hidden_size * 4
    assert fits.ok and fits.weight_bytes > 0 and fits.temp_bytes > 0
    assert fits.total_bytes >= 2 * hidden + fits.weight_bytes  # the layer steps at least
    # Windows whose f32 hidden states alone pass a v5e's 16 GB: does not fit, sizes named.
    many = 16 * 10**9 // (WINDOW_LEN * cfg.hidden_size * 4) + 1
    over = check_reference("v5e", cfg, many, WINDOW_LEN)
    assert over.error.startswith("does not fit HBM: the f32 reference needs")
    assert over.total_bytes > over.hbm_bytes
