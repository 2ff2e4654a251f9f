"""Tenant experiments served through the OpenAI-compatible server (``via: http``)."""

from __future__ import annotations

import pytest
from tenant_exp_helpers import (
    TINY_ENGINE_PARAMS,
    arm_requests,
    assert_claim_metrics_recorded,
    run_tiny,
    trial_labels,
    write_checkpoint,
)

from claimbench.lab.load.tenant_runs import serve

CLAIM = "admission-at-ingress"
PARAMS = {
    "num_tenants": 2,
    "base_load": 0.5,
    "overload": 4.0,
    "queue_batches": 0.5,
    "episode_requests": 12,
    "recovery_requests": 8,
    "saturation_requests": 12,
}


@pytest.mark.slow
def test_admission_at_ingress_runs_over_http_and_limits_answer_429(tmp_path):
    ctx = run_tiny(
        CLAIM, write_checkpoint(tmp_path / "ckpt"), 1, base=TINY_ENGINE_PARAMS, via="http", **PARAMS
    )
    assert_claim_metrics_recorded(ctx)
    base, bounded, unbounded = (arm_requests(ctx, 0, m) for m in ("base", "bounded", "unbounded"))
    # Every request went through HTTP (the client's ids), each arm the same requests.
    for arm in (base, bounded, unbounded):
        assert arm["request_id"].str.startswith("http-").all()
        assert list(arm["prompt_tokens"]) == list(base["prompt_tokens"])
    # The tenant queue limits answer 429 at ingress; their reason is the engine's.
    rejected = bounded[bounded["finish_reason"] == "rejected"]
    assert len(rejected) > 0
    assert rejected["rejected_reason"].str.contains("max_queued_requests").all()
    assert trial_labels(ctx, "admitted_p99_ttft_ratio")[0]["rejected"] == len(rejected)
    assert (unbounded["finish_reason"] == "length").all()
    assert (base["finish_reason"] == "length").all()
    # What only the engine knows is matched back onto every admitted request.
    admitted = bounded[bounded["finish_reason"] == "length"]
    assert admitted["first_scheduled_s"].notna().all()
    assert (admitted["first_scheduled_s"] <= admitted["first_token_s"]).all()
    assert rejected["first_scheduled_s"].isna().all()


@pytest.mark.slow
def test_serve_rejects_an_unknown_path():
    with pytest.raises(ValueError, match="via must be 'engine' or 'http'"):
        serve(None, [], 1.0, via="grpc")


@pytest.mark.slow
def test_fairness_vtc_runs_over_http_with_the_engines_service_record(tmp_path):
    ctx = run_tiny(
        "fairness-vtc",
        write_checkpoint(tmp_path / "ckpt"),
        1,
        base=TINY_ENGINE_PARAMS,
        via="http",
        episode_requests=32,  # enough overload that steps run with requests waiting over HTTP
    )
    assert_claim_metrics_recorded(ctx)
    frames = ctx.frames()
    for mode in ("fcfs", "vtc"):
        requests = arm_requests(ctx, 0, mode)
        assert requests["request_id"].str.startswith("http-").all()
        assert (requests["finish_reason"] == "length").all()
        # The steps the server's engine took served exactly the tokens the clients received.
        steps = frames["steps"][(frames["steps"]["mode"] == mode) & (frames["steps"]["trial"] == 0)]
        outputs = steps[[c for c in steps.columns if c.startswith("output_tokens.")]]
        assert outputs.iloc[-1].sum() == requests["output_tokens"].sum()
