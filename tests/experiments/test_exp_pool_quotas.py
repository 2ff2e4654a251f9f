import pytest
from tenant_exp_helpers import (
    TINY_ENGINE_PARAMS,
    arm_requests,
    assert_claim_metrics_recorded,
    experiment,
    modes_in_order,
    run_tiny,
    trial_labels,
    write_checkpoint,
)

from claimbench.lab.load.tenant_runs import Saturation

CLAIM = "pool-quotas"
LENGTHS = {
    "quiet_prompt_len": [4, 8],
    "quiet_output_len": [2, 4],
    "noisy_prompt_len": [8, 20],
    "noisy_output_len": [8, 12],
}


def test_pool_holds_pool_requests_of_the_longest_noisy_kind():
    params = {
        "engine": {"page_size": 8},
        "noisy_prompt_len": [8, 20],
        "noisy_output_len": [8, 12],
        "pool_requests": 3,
    }
    assert experiment(CLAIM).pool_pages(params) == 3 * 4  # 32 tokens = 4 pages each


def test_noisy_burst_and_quiet_recovery_are_in_service_units():
    module = experiment(CLAIM)
    params = module.DEFAULT_PARAMS | LENGTHS | {"episode_requests": 40, "recovery_requests": 20}
    slow = Saturation(output_tokens_per_s=100.0, requests_per_s=10.0, num_requests=8)
    fast = Saturation(output_tokens_per_s=200.0, requests_per_s=20.0, num_requests=8)
    runs = {s: module.trial_requests(params, s, seed=1, vocab_size=97) for s in (slow, fast)}

    def work(requests, tenant, start_s, end_s):
        return sum(
            r.max_tokens for r in requests if r.tenant == tenant and start_s <= r.arrival_s < end_s
        )

    both = runs[slow]
    # Noisy bursts for 40 requests' service (4 s) at 1.5 x 100 tok/s, and stops; quiet runs
    # on through 20 more (2 s) at 0.1 x 100 tok/s: each within one request's tokens.
    assert abs(work(both, "noisy", 0, 4) - 600) <= LENGTHS["noisy_output_len"][1]
    assert work(both, "noisy", 4, 1e9) == 0
    assert abs(work(both, "quiet", 0, 6) - 60) <= LENGTHS["quiet_output_len"][1]
    assert [r.request_index for r in both] == list(range(len(both)))
    assert [r.arrival_s for r in both] == sorted(r.arrival_s for r in both)
    # A twice-faster engine gets the same requests in half the time.
    assert [r.prompt_token_ids for r in runs[fast]] == [r.prompt_token_ids for r in both]
    assert [r.arrival_s for r in runs[fast]] == pytest.approx([r.arrival_s / 2 for r in both])


@pytest.mark.slow
def test_tiny_run_serves_the_same_requests_in_every_arm(tmp_path):
    ctx = run_tiny(
        CLAIM,
        write_checkpoint(tmp_path / "ckpt"),
        base={k: v for k, v in TINY_ENGINE_PARAMS.items() if not k.endswith("_len")},
        **LENGTHS,
        pool_requests=2,
        quiet_load=0.2,
        episode_requests=8,
        recovery_requests=4,
        saturation_requests=8,
    )
    assert_claim_metrics_recorded(ctx)
    assert modes_in_order(ctx, 0) == ["alone", "shared", "quota"]
    assert modes_in_order(ctx, 1) == ["shared", "quota", "alone"]
    labels = trial_labels(ctx, "quota_p99_ratio")
    assert labels[0]["saturation_tok_s"] != labels[1]["saturation_tok_s"]
    # The second trial was paced by the saturation the first measured after its arms.
    assert labels[1]["paced_tok_s"] == labels[0]["saturation_tok_s"]
    for trial in range(2):
        alone, shared, quota = (arm_requests(ctx, trial, m) for m in ("alone", "shared", "quota"))
        assert set(alone["tenant"]) == {"quiet"} and set(shared["tenant"]) == {"quiet", "noisy"}
        # Shared and quota differ only in the quota; alone is the quiet part of the same.
        assert list(shared["prompt_tokens"]) == list(quota["prompt_tokens"])
        quiet = shared[shared["tenant"] == "quiet"]
        assert list(quiet["prompt_tokens"]) == list(alone["prompt_tokens"])
        assert labels[trial]["num_quiet"] == len(alone)
        assert labels[trial]["num_noisy"] == len(shared) - len(alone)
        for arm in (alone, shared, quota):
            assert (arm["finish_reason"] == "length").all()  # served to completion
    requests = ctx.frames()["requests"]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    requests.to_parquet(run_dir / "requests.parquet")
    [(title, svg)] = experiment(CLAIM).figures([run_dir])
    assert svg.startswith("<svg") and "quiet" in svg and "pooled p99" in svg
