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

from claimbench.lab.load.tenant_runs import Saturation, phased_requests

CLAIM = "admission-at-ingress"
PARAMS = {
    "num_tenants": 2,
    "base_load": 0.5,
    "overload": 2.0,
    "episode_requests": 12,
    "recovery_requests": 8,
    "saturation_requests": 12,
    "prompt_len": [4, 12],
    "output_len": [4, 8],
}


def test_ingress_limits_split_one_queue_over_the_tenants():
    limits = experiment(CLAIM).ingress_limits({"num_tenants": 4, "queue_batches": 1.0}, 8)
    assert [(t.id, t.max_queued_requests) for t in limits] == [(f"t{i}", 2) for i in range(4)]
    # Never below one request per tenant.
    limits = experiment(CLAIM).ingress_limits({"num_tenants": 4, "queue_batches": 0.1}, 8)
    assert {t.max_queued_requests for t in limits} == {1}


def test_base_arm_serves_the_overload_arms_requests_stretched():
    module = experiment(CLAIM)
    saturation = Saturation(output_tokens_per_s=60.0, requests_per_s=10.0, num_requests=12)
    timelines = module.phases(PARAMS)
    arms = {
        mode: phased_requests(module.mix(PARAMS, seed=3), saturation, timeline, vocab_size=300)
        for mode, timeline in timelines.items()
    }
    base, over = arms["base"], arms["bounded"]
    assert [r.prompt_token_ids for r in base] == [r.prompt_token_ids for r in over]
    assert [r.tenant for r in base] == [r.tenant for r in over] and arms["unbounded"] == over
    # The episode lasts 12 requests' service (1.2 s) at 2x: its arrivals come about 4x closer
    # together than the same requests' at base load (one factor for all of them: each phase
    # is its stretch of the stream scaled to the phase's wall; its exact value is where the
    # stream's work reaches the episode's, so near 4, not exactly); after it both arms run at
    # base load, their gaps in one ratio (near 1 on average; 4 recovery requests are too few
    # to hold it to one draw).
    episode_end_s = saturation.seconds_for(12)
    in_episode = [i for i, r in enumerate(over) if r.arrival_s < episode_end_s]
    factors = [base[i].arrival_s / over[i].arrival_s for i in in_episode]
    assert factors == pytest.approx([factors[0]] * len(factors))
    assert factors[0] == pytest.approx(4.0, rel=0.25)
    later = [i for i in range(len(over)) if i not in in_episode]
    assert len(later) > 2 and len(in_episode) > len(later)
    gaps = [
        (base[j].arrival_s - base[i].arrival_s) / (over[j].arrival_s - over[i].arrival_s)
        for i, j in zip(later, later[1:], strict=False)
    ]
    assert gaps == pytest.approx([gaps[0]] * len(gaps)) and gaps[0] > 0


@pytest.mark.slow
def test_tiny_run_compares_the_same_requests_under_both_policies(tmp_path):
    ctx = run_tiny(
        CLAIM,
        write_checkpoint(tmp_path / "ckpt"),
        base=TINY_ENGINE_PARAMS,
        # 8x: with async scheduling (CPU's default) a freed slot is refilled a step sooner, and
        # at 4x the tiny engine's one-request queues rarely overflowed.
        **PARAMS | {"overload": 8.0, "queue_batches": 0.5},
    )
    assert_claim_metrics_recorded(ctx)
    assert modes_in_order(ctx, 0) == ["base", "bounded", "unbounded"]
    assert modes_in_order(ctx, 1) == ["bounded", "unbounded", "base"]
    labels = trial_labels(ctx, "admitted_p99_ttft_ratio")
    assert labels[0]["saturation_tok_s"] != labels[1]["saturation_tok_s"]
    # The second trial was paced by the saturation the first measured after its arms.
    assert labels[1]["paced_tok_s"] == labels[0]["saturation_tok_s"]
    for trial in range(2):
        base, bounded, unbounded = (
            arm_requests(ctx, trial, mode) for mode in ("base", "bounded", "unbounded")
        )
        for arm in (bounded, unbounded):
            assert list(arm["prompt_tokens"]) == list(base["prompt_tokens"])
        # Limits only ever turn work away; without them nothing is rejected, and every
        # admitted request is served to the end.
        rejected = bounded[bounded["finish_reason"] == "rejected"]
        assert (
            len(rejected) > 0
            and rejected["rejected_reason"].str.contains("max_queued_requests").all()
        )
        assert labels[trial]["rejected"] == len(rejected)
        assert (unbounded["finish_reason"] == "length").all()
        assert (base["finish_reason"] == "length").all()
        assert (
            bounded.loc[bounded["finish_reason"] != "rejected", "finish_reason"] == "length"
        ).all()
