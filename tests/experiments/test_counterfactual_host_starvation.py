"""host-starvation's counterfactual: with both arms synchronous, overlap recovers nothing."""

import pytest
from counterfactual_helpers import assert_fails, metric_values
from tenant_exp_helpers import run_tiny, write_checkpoint
from test_exp_host_starvation import TINY

CLAIM = "host-starvation"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "model")


@pytest.mark.slow
def test_overlap_off_recovers_nothing(checkpoint):
    ctx = run_tiny(CLAIM, checkpoint, trials=1, base=TINY, counterfactual="overlap-off")
    frame = ctx.measurements_frame("run")
    assert_fails(CLAIM, "overlap_gain_pct", metric_values(frame, "overlap_gain_pct"))
