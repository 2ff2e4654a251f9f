"""tenant-tail-hidden's counterfactual: tenants that arrive the same way (poisson, equal
lengths) leave no small tenant's tail far above the pooled p99."""

import pytest
from counterfactual_helpers import assert_fails, metric_values
from tenant_exp_helpers import TINY_ENGINE_PARAMS, run_tiny, write_checkpoint

CLAIM = "tenant-tail-hidden"
LENGTHS = {
    f"{c}_{kind}": TINY_ENGINE_PARAMS[kind]
    for c in ("big", "small")
    for kind in ("prompt_len", "output_len")
}


@pytest.mark.slow
def test_identical_tenants_hide_no_tail(tmp_path):
    ctx = run_tiny(
        CLAIM,
        write_checkpoint(tmp_path / "ckpt"),
        trials=2,
        counterfactual="tenants-identical",
        num_small_tenants=3,
        episode_requests=48,
        **LENGTHS,
    )
    frame = ctx.measurements_frame("run")
    metric = "worst_tenant_p99_ttft_over_pooled"
    assert_fails(CLAIM, metric, metric_values(frame, metric))
