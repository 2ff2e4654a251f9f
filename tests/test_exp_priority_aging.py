import pytest
from tenant_exp_helpers import assert_claim_metrics_recorded, experiment, run_tiny, write_checkpoint

CLAIM = "priority-aging"


def test_mix_puts_the_tiers_on_the_tenants():
    spec = experiment(CLAIM).mix(
        {
            "high_load": 0.8,
            "low_load": 0.2,
            "prompt_len": [4, 8],
            "output_len": [4, 8],
            "duration_s": 5.0,
        },
        seed=0,
    )
    assert [(t.tenant, t.priority, t.rate) for t in spec.tenants] == [
        ("high", 0, 0.8),
        ("low", 1, 0.2),
    ]
    with pytest.raises(ValueError, match="param low_load must be > 0, got 0"):
        experiment(CLAIM).mix({"high_load": 1.0, "low_load": 0}, seed=0)


def test_tiny_run_records_the_claim_metrics_each_trial(tmp_path):
    ctx = run_tiny(CLAIM, write_checkpoint(tmp_path / "ckpt"), aging_requests=4)
    assert_claim_metrics_recorded(ctx)
    requests = ctx.frames()["requests"]
    assert set(requests["mode"]) == {"high-alone", "strict", "aging"}
    alone = requests[requests["mode"] == "high-alone"]
    assert set(alone["tenant"]) == {"high"}
