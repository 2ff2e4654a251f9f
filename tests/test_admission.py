import pytest
from engine_helpers import make_request

from claimbench.engine.admission import AdmissionControl, TokenBucket
from claimbench.engine.tenants import Tenant, TenantTable


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
