"""levers-multiply's counterfactual: when the combined setting's KV is destroyed while each
lever alone is as registered, the combined cost exceeds the sum of the separate ones."""

import pytest
from counterfactual_helpers import assert_fails, assert_holds, metric_values
from precision_helpers import run_experiment

from claimbench.models.checkpoint import default_model_path

CLAIM = "levers-multiply"
PARAMS = {
    "num_windows": 2,
    "window_len": 32,
    "engine": {"kv_pool_bytes": 2**20, "max_num_seqs": 4, "max_num_batched_tokens": 64},
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("counterfactual", "check"), [("none", assert_holds), ("levers-interact", assert_fails)]
)
def test_interacting_levers_break_additivity(counterfactual, check):
    frame = run_experiment(CLAIM, PARAMS | {"counterfactual": counterfactual}, default_model_path())
    metric = "ppl_additivity_gap_pct"
    check(CLAIM, metric, metric_values(frame, metric))
