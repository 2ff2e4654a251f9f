from tenant_exp_helpers import assert_claim_metrics_recorded, experiment, run_tiny, write_checkpoint

CLAIM = "pool-quotas"


def test_pool_holds_pool_requests_of_the_longest_noisy_kind():
    params = {
        "engine": {"page_size": 8},
        "noisy_prompt_len": [8, 20],
        "noisy_output_len": [8, 12],
        "pool_requests": 3,
    }
    assert experiment(CLAIM).pool_pages(params) == 3 * 4  # 32 tokens = 4 pages each


def test_tiny_run_records_the_claim_metrics_each_trial(tmp_path):
    ctx = run_tiny(
        CLAIM,
        write_checkpoint(tmp_path / "ckpt"),
        quiet_prompt_len=[4, 8],
        quiet_output_len=[2, 4],
        noisy_prompt_len=[8, 20],
        noisy_output_len=[8, 12],
        pool_requests=2,
        quiet_load=0.2,
    )
    assert_claim_metrics_recorded(ctx)
    requests = ctx.frames()["requests"]
    assert set(requests["mode"]) == {"alone", "shared", "quota"}
    assert set(requests.loc[requests["mode"] == "alone", "tenant"]) == {"quiet"}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    requests.to_parquet(run_dir / "requests.parquet")
    [(title, svg)] = experiment(CLAIM).figures([run_dir])
    assert svg.startswith("<svg") and "quiet" in svg and "pooled p99" in svg
