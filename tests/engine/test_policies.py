import numpy as np
import pytest
from engine_helpers import make_request

from claimbench.engine.config import PolicyParams
from claimbench.engine.config_tenants import Tenant, TenantTable
from claimbench.engine.sched.policies import (
    ORDERINGS,
    VICTIMS,
    PoolView,
    get_victim_policy,
    make_ordering,
)


def req(tenant="a", arrival=0.0, priority=0, prompt=4, computed=0):
    r = make_request(prompt, tenant=tenant, arrival=arrival)
    r.priority = priority
    r.num_computed_tokens = computed
    return r


def ids(requests):
    return [r.request_id for r in requests]


def test_registries_keep_the_original_names():
    assert {"fcfs", "priority", "priority-aging", "vtc", "wvtc"} == set(ORDERINGS)
    assert {"newest", "lowest-priority", "fair-share", "tier-fair-share"} == set(VICTIMS)
    with pytest.raises(ValueError, match="unknown scheduling_policy 'lifo'"):
        make_ordering("lifo")
    with pytest.raises(ValueError, match="unknown victim_policy 'oldest'"):
        get_victim_policy("oldest")


def test_strict_priority_puts_every_top_tier_request_first():
    low_early = req(arrival=0.0, priority=2)
    high_late = req(arrival=100.0, priority=0)
    mid = req(arrival=1.0, priority=1)
    order = make_ordering("priority").order([low_early, high_late, mid], now=200.0)
    assert order == [high_late, mid, low_early]


def test_aging_gains_one_tier_per_aging_s():
    ordering = make_ordering("priority-aging", PolicyParams(aging_s=10.0))
    low = req(arrival=0.0, priority=1)  # virtual deadline 0 + 1 * 10 = 10
    high_before = req(arrival=9.0, priority=0)  # deadline 9: still ahead of low
    high_after = req(arrival=11.0, priority=0)  # deadline 11: low has aged past it
    assert ordering.order([high_after, low, high_before], now=20.0) == [
        high_before,
        low,
        high_after,
    ]


def test_aging_order_does_not_depend_on_now():
    ordering = make_ordering("priority-aging", PolicyParams(aging_s=2.0))
    reqs = [req(arrival=float(i), priority=i % 3) for i in range(9)]
    assert ordering.order(reqs, now=10.0) == ordering.order(reqs, now=1000.0)


def test_vtc_serves_least_counter_and_charges_steer_the_next_pick():
    vtc = make_ordering("vtc")  # w_in 1, w_out 2
    a1, a2, b1 = req("a", 0.0), req("a", 1.0), req("b", 2.0)
    vtc.charge(req("b"), 10, 0)  # b has had 10 units of service, a none
    it = iter(vtc.order([a1, a2, b1], now=3.0))
    assert next(it) is a1
    vtc.charge(a1, 8, 1)  # a: 8 + 2 = 10, ties b; a's next arrived earlier
    assert next(it) is a2
    vtc.charge(a2, 1, 0)  # a: 11 > b: 10
    assert next(it) is b1
    assert vtc.counters == {"a": 11.0, "b": 10.0}


def test_vtc_lifts_a_returning_tenant_to_the_least_backlogged_counter():
    vtc = make_ordering("vtc")
    vtc.counters.update({"a": 100.0, "b": 40.0, "idle": 5.0})
    waiting = [req("a"), req("b")]
    vtc.on_arrival(req("idle"), waiting)
    assert vtc.counter("idle") == 40.0  # min over the backlogged a (100) and b (40)
    vtc.on_arrival(req("new"), waiting)
    assert vtc.counter("new") == 40.0  # a first-time tenant starts level, not at 0
    vtc.on_arrival(req("a"), waiting)  # already backlogged: untouched
    assert vtc.counter("a") == 100.0


def test_vtc_lift_never_lowers_and_uses_last_served_when_queue_is_empty():
    vtc = make_ordering("vtc")
    vtc.charge(req("a"), 30, 0)  # a served last, counter 30
    vtc.counters["b"] = 50.0
    vtc.on_arrival(req("c"), waiting=[])
    assert vtc.counter("c") == 30.0
    vtc.on_arrival(req("b"), waiting=[req("c")])
    assert vtc.counter("b") == 50.0  # above the floor already


def test_wvtc_divides_service_by_weight():
    tenants = TenantTable([Tenant("a", weight=2.0), Tenant("b", weight=1.0)])
    wvtc = make_ordering("wvtc", PolicyParams(tenants=tenants))
    wvtc.charge(req("a"), 10, 5)  # (10 + 2 * 5) / 2
    wvtc.charge(req("b"), 10, 5)  # (10 + 2 * 5) / 1
    assert wvtc.counters == {"a": 10.0, "b": 20.0}
    plain = make_ordering("vtc", PolicyParams(tenants=tenants))
    plain.charge(req("a"), 10, 5)
    assert plain.counters == {"a": 20.0}


def pool(pages, usable=100, tenants=()):
    return PoolView(pages, usable, TenantTable(tenants))


def test_newest_victim():
    old, new = req(arrival=1.0), req(arrival=2.0)
    assert get_victim_policy("newest")([new, old], pool({})) is new
    with pytest.raises(ValueError, match="no preemption candidates"):
        get_victim_policy("newest")([], pool({}))


def test_lowest_priority_victim_then_newest():
    top_new = req(arrival=9.0, priority=0)
    low_old, low_new = req(arrival=1.0, priority=3), req(arrival=2.0, priority=3)
    assert get_victim_policy("lowest-priority")([top_new, low_old, low_new], pool({})) is low_new


def test_fair_share_victim_takes_from_the_tenant_furthest_over_its_share():
    # 100 pages, a and b active with weights 1 and 3: shares 25 and 75.
    tenants = [Tenant("b", weight=3.0)]
    a_big = req("a", arrival=0.0, computed=50)
    a_small = req("a", arrival=1.0, computed=5)
    b_new = req("b", arrival=5.0, computed=1)
    victim = get_victim_policy("fair-share")(
        [b_new, a_big, a_small], pool({"a": 40, "b": 60}, tenants=tenants)
    )
    assert victim is a_small  # a is 15 over its share (b is 15 under); fewest computed tokens
    # Unweighted, b holds 60 of 100 (share 50) and a 40: b is the victim's tenant.
    assert get_victim_policy("fair-share")([b_new, a_big], pool({"a": 40, "b": 60})) is b_new


def test_fair_share_ties_on_computed_tokens_go_to_the_newest():
    r1, r2 = req("a", arrival=1.0, computed=4), req("a", arrival=2.0, computed=4)
    assert get_victim_policy("fair-share")([r1, r2], pool({"a": 10})) is r2


def test_tier_fair_share_spares_the_top_tier_even_far_over_its_share():
    # 100 pages: top holds 80 (share 50, 30 over), low holds 20 (30 under).
    top = req("top", arrival=5.0, priority=0, computed=1)
    low = req("low", arrival=0.0, priority=1, computed=60)
    view = pool({"top": 80, "low": 20})
    assert get_victim_policy("fair-share")([top, low], view) is top  # tier-blind
    assert get_victim_policy("tier-fair-share")([top, low], view) is low


def test_tier_fair_share_is_fair_share_below_the_top_tier():
    # Shares of 90 pages over three tenants: 30 each. mid (tier 1) holds 50, 20 over;
    # bulk (tier 2) holds 10. Fair share takes from mid, where lowest-priority takes bulk.
    top = req("top", priority=0)
    mid_old = req("mid", arrival=0.0, priority=1, computed=30)
    mid_new = req("mid", arrival=3.0, priority=1, computed=2)
    bulk = req("bulk", arrival=4.0, priority=2, computed=1)
    view = pool({"top": 30, "mid": 50, "bulk": 10}, usable=90)
    candidates = [top, mid_old, mid_new, bulk]
    assert get_victim_policy("lowest-priority")(candidates, view) is bulk
    assert get_victim_policy("tier-fair-share")(candidates, view) is mid_new


def test_tier_fair_share_takes_the_top_tier_only_when_nothing_else_runs():
    a_big = req("a", arrival=0.0, priority=0, computed=40)
    a_small = req("a", arrival=1.0, priority=0, computed=3)
    b = req("b", arrival=2.0, priority=0, computed=1)
    view = pool({"a": 70, "b": 10})
    assert get_victim_policy("tier-fair-share")([a_big, b, a_small], view) is a_small


def test_tier_fair_share_never_picks_the_top_tier_beside_a_lower_one():
    # Random running sets: whenever any candidate is below the top tier, so is the victim;
    # and it is the fair-share choice among those candidates.
    rng = np.random.default_rng(0)
    policy = get_victim_policy("tier-fair-share")
    for _ in range(300):
        tenants = [f"t{i}" for i in range(int(rng.integers(1, 5)))]
        candidates = [
            req(
                str(rng.choice(tenants)),
                arrival=float(rng.integers(0, 50)),
                priority=int(rng.integers(0, 3)),
                computed=int(rng.integers(0, 100)),
            )
            for _ in range(int(rng.integers(1, 8)))
        ]
        view = pool({t: int(rng.integers(0, 40)) for t in tenants}, usable=120)
        victim = policy(candidates, view)
        lower = [r for r in candidates if r.priority > 0]
        if lower:
            assert victim.priority > 0
            assert victim is get_victim_policy("fair-share")(lower, view)
        else:
            assert victim is get_victim_policy("fair-share")(candidates, view)
