"""The scheduler with tenants: ingress admission, KV quotas, VTC charges, service snapshots."""

import pytest
from engine_helpers import make_request

from claimbench.engine.config import EngineConfig
from claimbench.engine.config_tenants import Tenant
from claimbench.engine.kv.block_manager import BlockManager
from claimbench.engine.request import RequestStatus
from claimbench.engine.sched.scheduler import Scheduler


def make_scheduler(num_pages=64, **cfg) -> Scheduler:
    defaults = dict(max_num_seqs=4, max_num_batched_tokens=16, max_model_len=64, page_size=4)
    return Scheduler(EngineConfig(**{**defaults, **cfg}), BlockManager(num_pages, 4))


def advance(out) -> None:
    for request, n in out.scheduled:
        request.num_computed_tokens += n
        if request.num_uncomputed_tokens == 0:
            request.append_output(5, 0.0, 0.0)


def submit(s, request):
    reason = s.admit(request)
    if reason is None:
        s.add(request)
    return reason


def test_ingress_rejection_names_the_limit_and_takes_no_pages():
    s = make_scheduler(tenants=(Tenant("a", max_queued_requests=1),))
    assert submit(s, make_request(4, tenant="a")) is None
    reason = submit(s, make_request(4, tenant="a"))
    assert "max_queued_requests=1" in reason
    assert len(s.waiting) == 1 and s.block_manager.num_used_pages == 0
    assert s.admission.num_rejected == {("a", "max_queued_requests"): 1}
    assert submit(s, make_request(4, tenant="b")) is None  # other tenants are unaffected


def test_tenant_tier_caps_a_requests_priority():
    s = make_scheduler(tenants=(Tenant("low", priority=2),))
    r = make_request(4, tenant="low")
    r.priority = 0
    submit(s, r)
    assert r.priority == 2


def test_quota_lets_a_guaranteed_tenant_past_a_tenant_at_its_cap():
    # 8 usable pages: quiet is guaranteed 2, noisy may burst to 4 of the other 6.
    tenants = (Tenant("quiet", guaranteed_pages=2), Tenant("noisy", burst_pages=4))
    s = make_scheduler(num_pages=9, max_num_batched_tokens=32, tenants=tenants)
    first = make_request(16, 1, tenant="noisy", arrival=0.0)  # 4 pages: all noisy may hold
    blocked = make_request(4, tenant="noisy", arrival=1.0)
    quiet = make_request(4, tenant="quiet", arrival=2.0)
    for r in (first, blocked, quiet):
        assert submit(s, r) is None
    out = s.schedule(0.0)
    assert [r for r, _ in out.scheduled] == [first, quiet]  # FCFS skips the capped request
    assert blocked.status is RequestStatus.WAITING
    assert s.block_manager.tenant_pages == {"noisy": 4, "quiet": 1}
    too_big = make_request(16, 2, tenant="noisy")  # 17 tokens at full length: 5 pages
    assert "tenant 'noisy' may hold at most 4" in s.admit(too_big)


def test_without_quotas_the_head_of_the_queue_blocks():
    s = make_scheduler(num_pages=5, max_num_batched_tokens=32)  # 4 usable pages
    first, second, third = (make_request(n, 1, arrival=float(i)) for i, n in enumerate((12, 8, 4)))
    for r in (first, second, third):
        assert submit(s, r) is None
    out = s.schedule(0.0)
    assert [r for r, _ in out.scheduled] == [first]  # second needs 2 pages, 1 is free: stop


def test_quota_preemption_takes_from_tenants_over_their_guarantee():
    # 8 usable pages: a is guaranteed 4, b and c share the 4-page burst region.
    s = make_scheduler(
        num_pages=9, max_num_batched_tokens=24, tenants=(Tenant("a", guaranteed_pages=4),)
    )
    b = make_request(8, tenant="b", arrival=0.0)
    c = make_request(8, tenant="c", arrival=1.0)
    a = make_request(8, tenant="a", arrival=2.0)  # the newest request
    for r in (b, c, a):
        assert submit(s, r) is None
    advance(s.schedule(0.0))
    assert s.block_manager.tenant_pages == {"a": 2, "b": 2, "c": 2}  # burst region full
    out = s.schedule(0.0)
    # b's 9th token needs a burst page. a, below its guarantee, is no candidate although
    # newest: c, the newest tenant over its guarantee, gives its pages up.
    assert out.preempted == [c]
    assert [r for r, _ in out.scheduled] == [b, a]


@pytest.mark.slow
def test_vtc_charges_and_the_ledger_snapshots_each_step():
    s = make_scheduler(scheduling_policy="vtc", max_num_seqs=1)
    a1, a2, b1 = (
        make_request(6, tenant="a", arrival=0.0),
        make_request(6, tenant="a", arrival=1.0),
        make_request(6, tenant="b", arrival=2.0),
    )
    for r in (a1, a2, b1):
        submit(s, r)
    out = s.schedule(0.0)
    assert [r for r, _ in out.scheduled] == [a1]
    assert s.ordering.counters == {"a": 6 + 2.0, "b": 0.0}  # 6 input + 1 output * 2
    steps = s.service.columns()
    assert steps.loc[0, "input_tokens.a"] == 6 and steps.loc[0, "output_tokens.a"] == 1
    assert bool(steps.loc[0, "backlogged.b"]) and steps.loc[0, "running_tokens"] == 6
    advance(out)
    s.finish(a1)
    # b has the least counter now: it goes before a's earlier request.
    assert [r for r, _ in s.schedule(0.0).scheduled] == [b1]
