"""bucket-padding: its measured condition, with the power-of-two buckets replaced by one
static shape (the step budget), lands on the other side of its threshold."""

from __future__ import annotations

import pytest
from counterfactual_helpers import assert_fails, metric_values
from tenant_exp_helpers import run_tiny, write_checkpoint
from test_exp_bucket_padding import TINY

CLAIM = "bucket-padding"


@pytest.mark.slow
def test_one_bucket_pads_decode_steps_to_the_budget(tmp_path):
    ctx = run_tiny(
        CLAIM,
        write_checkpoint(tmp_path / "ckpt"),
        trials=1,
        base=TINY | {"counterfactual": "one-bucket"},
    )
    frame = ctx.measurements_frame("run")
    # Decode steps of a few sequences now pad to the 32-token budget, not to 16.
    steps = ctx.frames()["steps"]
    assert set(steps.loc[steps["policy"] == "engine (powers of two)", "token_bucket"]) == {32}
    assert_fails(CLAIM, "padding_waste_pct", metric_values(frame, "padding_waste_pct"))
