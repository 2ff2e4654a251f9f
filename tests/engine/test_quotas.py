import pytest
from engine_helpers import make_request

from claimbench.engine.config import EngineConfig
from claimbench.engine.config_tenants import Tenant, TenantTable
from claimbench.engine.kv.block_manager import BlockManager
from claimbench.engine.sched.quotas import KVQuotas
from claimbench.engine.sched.scheduler import Scheduler


def quotas(usable=20):
    # quiet: 6 guaranteed, no burst; noisy: 2 guaranteed, burst capped at 8; others: defaults.
    tenants = TenantTable(
        [
            Tenant("quiet", guaranteed_pages=6, burst_pages=0),
            Tenant("noisy", guaranteed_pages=2, burst_pages=8),
        ]
    )
    return KVQuotas(tenants, usable)


def test_burst_region_is_what_guarantees_leave():
    q = quotas()
    assert q.num_burst_pages == 12  # 20 - 6 - 2
    assert q.max_pages("quiet") == 6 and q.max_pages("noisy") == 10 and q.max_pages("x") == 12


def test_guarantee_is_reserved_against_other_tenants():
    q = quotas()
    pages = {"noisy": 10, "x": 4}  # noisy: 8 burst (its cap); x: 4 burst -> region full
    assert q.num_free_burst_pages(pages) == 0
    assert q.headroom("x", pages) == 0
    assert q.headroom("noisy", pages) == 0
    assert q.headroom("quiet", pages) == 6  # untouched by the others' burst use
    assert q.can_take("quiet", 6, pages) and not q.can_take("quiet", 7, pages)


def test_burst_cap_limits_a_tenant_even_with_free_burst_pages():
    q = quotas()
    pages = {"noisy": 9}  # 7 over its guarantee, cap 8
    assert q.num_free_burst_pages(pages) == 5
    assert q.headroom("noisy", pages) == 1
    assert q.headroom("y", pages) == 5


def test_usage_below_guarantee_does_not_touch_the_burst_region():
    q = quotas()
    assert q.over_guarantee("quiet", {"quiet": 4}) == 0
    assert q.num_free_burst_pages({"quiet": 4, "noisy": 1}) == 12
    assert q.headroom("noisy", {"noisy": 1}) == 1 + 8


def test_victim_candidates_are_tenants_over_their_guarantee():
    q = quotas()
    pages = {"noisy": 6, "x": 8, "quiet": 3}  # noisy 4 over, x 8 over: region full
    quiet_r, noisy_r, x_r = (make_request(4, tenant=t) for t in ("quiet", "noisy", "x"))
    cands = [quiet_r, noisy_r, x_r]
    assert q.victim_candidates("x", cands, pages) == [noisy_r, x_r]
    # noisy at its burst cap can only make room by giving up its own pages.
    capped = {"noisy": 10}
    assert q.victim_candidates("noisy", cands, capped) == [noisy_r]


def test_guarantees_beyond_the_pool_are_refused():
    tenants = TenantTable([Tenant("a", guaranteed_pages=8), Tenant("b", guaranteed_pages=8)])
    with pytest.raises(ValueError, match="add up to 16, more than the 12 usable pages"):
        KVQuotas(tenants, 12)


# -- the mechanism in the scheduler, step by step --------------------------------------

NOISY_REQUESTS = 12  # 12 + 8 tokens each: 5 four-token pages at full length
QUIET_EVERY = 3  # a quiet 4 + 4 token request (2 pages) arrives every 3 steps


def serve_steps(tenants, num_steps=60):
    """Noisy's requests all arrive at step 0, quiet's one every QUIET_EVERY steps, into 16
    usable pages; returns (noisy pages after each step, each quiet request's steps from
    arrival to first scheduled)."""
    cfg = EngineConfig(
        max_num_seqs=8, max_num_batched_tokens=32, max_model_len=64, page_size=4, tenants=tenants
    )
    s = Scheduler(cfg, BlockManager(17, 4))
    arrived, noisy_pages, waits = {}, [], {}
    for step in range(num_steps):
        new = [make_request(12, 8, tenant="noisy") for _ in range(0 if step else NOISY_REQUESTS)]
        if step % QUIET_EVERY == 0:
            new.append(make_request(4, 4, tenant="quiet"))
        for r in new:
            assert s.admit(r) is None
            s.add(r)
            arrived[r.request_id] = step
        for r, n in s.schedule(float(step)).scheduled:
            if r.tenant == "quiet":
                waits.setdefault(r.request_id, step - arrived[r.request_id])
            r.num_computed_tokens += n
            if r.num_uncomputed_tokens == 0:
                r.append_output(5, 0.0, 0.0)
                if r.num_output_tokens == r.sampling.max_tokens:
                    s.finish(r)
        noisy_pages.append(s.block_manager.tenant_pages.get("noisy", 0))
    return noisy_pages, list(waits.values())


def test_quota_caps_the_noisy_tenant_while_the_quiet_guarantee_holds():
    guarantee = 4
    pages, waits = serve_steps((Tenant("quiet", guaranteed_pages=guarantee),))
    assert max(pages) <= 16 - guarantee  # never into the quiet tenant's reserve
    assert max(pages) > 16 - guarantee - 5  # ...but it does fill the burst region
    # Every quiet request is scheduled on arrival, or the step after when the noisy
    # prefills arrived with it and took that step's token budget (not pages).
    assert len(waits) == 60 // QUIET_EVERY and max(waits) <= 1


def test_without_quotas_the_noisy_tenant_takes_the_quiet_tenants_pages():
    pages, waits = serve_steps(())
    assert max(pages) > 16 - 4
    assert max(waits) > 5  # quiet requests queue behind the noisy backlog
