"""kv-fp8's counterfactual: with the fp8 arm's scale one that rounds every K and V to zero,
the perplexity cost lands far past the claim's threshold (perplexity is deterministic)."""

import pytest
from counterfactual_helpers import assert_fails, assert_holds, metric_values
from precision_helpers import run_experiment

from claimbench.models.checkpoint import default_model_path

CLAIM = "kv-fp8"
PARAMS = {
    "num_windows": 2,
    "window_len": 32,
    "compare_unit_scale": False,
    "engine": {"kv_pool_bytes": 2**20, "max_num_seqs": 4, "max_num_batched_tokens": 64},
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("counterfactual", "check"), [("none", assert_holds), ("kv-destroyed", assert_fails)]
)
def test_destroyed_kv_costs_perplexity_calibrated_fp8_does_not(counterfactual, check):
    # The shipped trained model: a random one has no quality for a destroyed cache to lose.
    frame = run_experiment(CLAIM, PARAMS | {"counterfactual": counterfactual}, default_model_path())
    check(CLAIM, "ppl_delta_pct", metric_values(frame, "ppl_delta_pct"))
