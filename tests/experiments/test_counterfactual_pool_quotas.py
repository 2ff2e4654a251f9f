"""pool-quotas' counterfactuals: the quota switched off in the quota arm, and on in the shared
one, move each measured condition past its threshold."""

import pytest
from counterfactual_helpers import assert_fails, metric_values
from tenant_exp_helpers import TINY_ENGINE_PARAMS, run_tiny, write_checkpoint

CLAIM = "pool-quotas"
PARAMS = {
    "quiet_prompt_len": [4, 8],
    "quiet_output_len": [2, 4],
    "noisy_prompt_len": [8, 20],
    "noisy_output_len": [8, 12],
    "pool_requests": 2,
    "quiet_load": 0.2,
    "noisy_load": 3.0,
    "episode_requests": 16,
    "recovery_requests": 4,
    "saturation_requests": 8,
}
BASE = {k: v for k, v in TINY_ENGINE_PARAMS.items() if not k.endswith("_len")}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt"))


@pytest.mark.slow
def test_quotas_off_leaves_the_quiet_tenant_behind_the_noisy_backlog(checkpoint):
    ctx = run_tiny(CLAIM, checkpoint, trials=1, base=BASE, counterfactual="quotas-off", **PARAMS)
    frame = ctx.measurements_frame("run")
    assert_fails(CLAIM, "quota_p99_ratio", metric_values(frame, "quota_p99_ratio"))


@pytest.mark.slow
def test_quotas_everywhere_protect_the_quiet_tenant_in_the_shared_arm(checkpoint):
    ctx = run_tiny(
        CLAIM, checkpoint, trials=1, base=BASE, counterfactual="quotas-everywhere", **PARAMS
    )
    frame = ctx.measurements_frame("run")
    assert_fails(CLAIM, "shared_p99_ratio", metric_values(frame, "shared_p99_ratio"))
