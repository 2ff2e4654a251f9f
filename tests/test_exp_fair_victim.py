import pytest
from tenant_exp_helpers import assert_claim_metrics_recorded, experiment, run_tiny, write_checkpoint

CLAIM = "fair-victim"


def test_pool_pages_is_a_fraction_of_a_full_batch():
    params = {
        "engine": {"page_size": 8, "max_num_seqs": 4},
        "prompt_len": [4, 8],
        "output_len": [8, 16],
        "kv_fraction": 0.5,
    }
    # Longest request: 8 + 16 = 24 tokens = 3 pages; 4 of them = 12 pages; half = 6.
    assert experiment(CLAIM).pool_pages(params) == 6
    with pytest.raises(ValueError, match="leaves 1 pages, fewer than one 24-token request"):
        experiment(CLAIM).pool_pages(params | {"kv_fraction": 0.1})


def test_tiny_run_records_the_claim_metrics_each_trial(tmp_path):
    ctx = run_tiny(
        CLAIM,
        write_checkpoint(tmp_path / "ckpt"),
        prompt_len=[4, 8],
        output_len=[8, 16],
        kv_fraction=0.34,
        load=1.5,
    )
    frame = assert_claim_metrics_recorded(ctx)
    assert (frame.loc[frame["metric"] == "top_tier_preemptions", "value"] >= 0).all()
    assert set(ctx.frames()["requests"]["mode"]) == {"newest", "fair-share"}
