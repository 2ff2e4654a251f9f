import dataclasses

import numpy as np
import pytest
from engine_helpers import make_request, tiny_engine

from claimbench.engine.config_tenants import Tenant, TenantTable
from claimbench.engine.sched.admission import AdmissionControl, TokenBucket
from claimbench.lab.load.step_driver import serve_by_step
from claimbench.workload.build import WorkloadRequest


def control(*tenants):
    return AdmissionControl(TenantTable(tenants))


def test_unconfigured_tenant_is_never_limited():
    ac = control(Tenant("capped", max_queued_requests=1))
    waiting = [make_request(4, tenant="free") for _ in range(50)]
    assert ac.admit(make_request(4, tenant="free"), waiting) is None
    assert ac.total_rejected == 0


def test_max_queued_requests_counts_only_the_tenants_own_waiting_requests():
    ac = control(Tenant("a", max_queued_requests=2))
    waiting = [
        make_request(4, tenant="a"),
        make_request(4, tenant="b"),
        make_request(4, tenant="b"),
    ]
    assert ac.admit(make_request(4, tenant="a"), waiting) is None  # 1 queued + this one = 2
    waiting.append(make_request(4, tenant="a"))
    reason = ac.admit(make_request(4, tenant="a"), waiting)
    assert reason == "tenant 'a' already has 2 queued requests (max_queued_requests=2)"
    assert ac.num_rejected == {("a", "max_queued_requests"): 1}
    assert ac.num_admitted == {"a": 1}


def test_max_queued_tokens_counts_prompt_plus_max_tokens():
    ac = control(Tenant("a", max_queued_tokens=30))
    waiting = [make_request(10, max_tokens=10, tenant="a")]  # 20 tokens queued
    assert ac.admit(make_request(5, max_tokens=5, tenant="a"), waiting) is None  # 20 + 10 = 30
    reason = ac.admit(make_request(5, max_tokens=6, tenant="a"), waiting)
    assert "has 20 queued tokens; 11 more exceed max_queued_tokens=30" in reason


def test_token_bucket_refills_on_the_arrival_timeline():
    # 10 tokens/s, bucket of 20; each request costs 4 + 6 = 10.
    ac = control(Tenant("a", token_rate=10.0, token_burst=20.0))

    def at(t):
        return make_request(4, max_tokens=6, tenant="a", arrival=t)

    assert ac.admit(at(0.0), []) is None
    assert ac.admit(at(0.0), []) is None  # the burst covers two at once
    reason = ac.admit(at(0.5), [])  # 0.5 s refilled 5 tokens
    assert "has 5 of 10 tokens" in reason and "token_rate=10/s" in reason
    assert ac.admit(at(1.0), []) is None  # 10 tokens after 1 s
    assert ac.num_rejected == {("a", "token_rate"): 1}


def test_retry_after_is_the_wait_until_the_bucket_holds_the_request():
    ac = control(Tenant("a", token_rate=4.0, token_burst=20.0), Tenant("q", max_queued_requests=1))
    first = make_request(4, max_tokens=6, tenant="a", arrival=0.0)  # costs 10
    assert ac.admit(first, []) is None and ac.retry_after_s(first) == 0.0
    late = make_request(10, max_tokens=6, tenant="a", arrival=0.5)  # 16 > 10 + 0.5 * 4
    assert ac.admit(late, []) is not None
    assert ac.retry_after_s(late) == pytest.approx((16 - 12) / 4.0)
    again = make_request(10, max_tokens=6, tenant="a", arrival=0.5 + ac.retry_after_s(late))
    assert ac.admit(again, []) is None  # after the advised wait it fits
    too_big = make_request(20, max_tokens=6, tenant="a", arrival=2.0)  # 26 > the bucket's 20
    assert ac.retry_after_s(too_big) is None  # no wait makes it fit
    queued = make_request(2, tenant="q")
    assert ac.admit(queued, [make_request(2, tenant="q")]) is not None
    assert ac.retry_after_s(queued) is None  # a queue limit, not a bucket


def test_asking_for_the_retry_after_changes_no_later_admission():
    ac = control(Tenant("a", token_rate=1.0, token_burst=10.0))
    assert ac.admit(make_request(4, max_tokens=4, tenant="a", arrival=10.0), []) is None  # 8
    late = make_request(4, max_tokens=4, tenant="a", arrival=14.0)  # 8 > 2 + 4
    assert ac.admit(late, []) is not None
    bucket = ac.buckets["a"]
    state = (bucket.level, bucket.time)
    # Asked at a later arrival than the bucket has seen, the bucket still is not refilled:
    # a request replayed out of order (arrival 12) then finds the level of time 14 unchanged.
    ahead = make_request(4, max_tokens=4, tenant="a", arrival=20.0)
    assert ac.retry_after_s(ahead) == pytest.approx(0.0)
    assert (bucket.level, bucket.time) == state
    assert ac.retry_after_s(late) == pytest.approx(2.0)
    assert (bucket.level, bucket.time) == state


def test_rejection_spends_no_tokens():
    ac = control(Tenant("a", token_rate=10.0, max_queued_requests=1))
    queued = [make_request(2, max_tokens=2, tenant="a", arrival=0.0)]
    assert ac.admit(make_request(2, max_tokens=2, tenant="a", arrival=0.0), queued) is not None
    assert ac.buckets == {}  # rejected before the bucket was touched
    assert ac.admit(make_request(4, max_tokens=6, tenant="a", arrival=0.0), []) is None


def test_token_bucket_time_never_runs_backwards():
    bucket = TokenBucket(rate=1.0, size=5.0, now=10.0)
    bucket.spend(5.0)
    assert bucket.refill(8.0) == 0.0
    assert bucket.refill(12.0) == 2.0


def test_tenant_limits_are_validated():
    with pytest.raises(ValueError, match=r"Tenant\('a'\).max_queued_requests must be >= 1"):
        Tenant("a", max_queued_requests=0)
    with pytest.raises(ValueError, match="token_burst=5.0 needs a token_rate"):
        Tenant("a", token_burst=5.0)
    with pytest.raises(ValueError, match="weight must be finite and > 0"):
        Tenant("a", weight=0)
    with pytest.raises(ValueError, match="configured twice"):
        TenantTable([Tenant("a"), Tenant("a")])
    assert Tenant("a", token_rate=8.0).bucket_size == 8.0
    assert Tenant("a", priority=2).tier_for(0) == 2 and Tenant("a").tier_for(3) == 3


# -- the mechanism on a real engine, in steps ------------------------------------------


def twice_capacity(num_steps=48):
    """One request per step for ``num_steps`` steps: twice what a 4-sequence engine serves
    when each request holds a slot for about 8 steps (an 8-token prompt, 8 outputs)."""
    return [
        (step, WorkloadRequest(0.0, "t", 0, tuple(range(3, 11)), 8, step))
        for step in range(num_steps)
    ]


@pytest.mark.slow
def test_bounded_admission_keeps_queueing_p99_below_unbounded_at_twice_the_load():
    engine = tiny_engine(max_num_seqs=4)
    p99, rejected = {}, {}
    for name, tenants in (("unbounded", ()), ("bounded", (Tenant("t", max_queued_requests=2),))):
        config = dataclasses.replace(engine.config, tenants=tenants)
        run = serve_by_step(engine, twice_capacity(), max_steps=500, config=config)
        admitted = run.requests["finish_reason"] != "rejected"
        p99[name] = float(np.percentile(run.ttft_steps[admitted], 99))
        rejected[name] = int((~admitted).sum())
    assert rejected["unbounded"] == 0 and rejected["bounded"] > 0
    # Unbounded, the queue grows by about half a request a step: the last arrivals wait
    # ~num_steps / 2 steps. Bounded, an admitted request has at most 2 ahead of it.
    assert p99["unbounded"] > 15
    assert p99["bounded"] < p99["unbounded"] / 3
