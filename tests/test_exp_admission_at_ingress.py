from tenant_exp_helpers import assert_claim_metrics_recorded, experiment, run_tiny, write_checkpoint

CLAIM = "admission-at-ingress"


def test_ingress_limits_split_one_queue_over_the_tenants():
    limits = experiment(CLAIM).ingress_limits({"num_tenants": 4, "queue_batches": 1.0}, 8)
    assert [(t.id, t.max_queued_requests) for t in limits] == [(f"t{i}", 2) for i in range(4)]
    # Never below one request per tenant.
    limits = experiment(CLAIM).ingress_limits({"num_tenants": 4, "queue_batches": 0.1}, 8)
    assert {t.max_queued_requests for t in limits} == {1}


def test_tiny_run_records_the_claim_metrics_each_trial(tmp_path):
    ctx = run_tiny(CLAIM, write_checkpoint(tmp_path / "ckpt"), overload=4.0, queue_batches=0.5)
    assert_claim_metrics_recorded(ctx)
    requests = ctx.frames()["requests"]
    bounded = requests[requests["mode"] == "bounded"]
    unbounded = requests[requests["mode"] == "unbounded"]
    # Limits only ever turn work away; without them nothing is rejected.
    assert (bounded["finish_reason"] == "rejected").any()
    assert not (unbounded["finish_reason"] == "rejected").any()
    rejected = bounded[bounded["finish_reason"] == "rejected"]
    assert rejected["rejected_reason"].str.contains("max_queued_requests").all()
