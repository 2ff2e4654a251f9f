"""The tier-aware victim policy inside the engine: a pool under page pressure, all requests
backlogged from the start, stepped to completion (no wall clock decides anything)."""

import pytest
from engine_helpers import tiny_engine

from claimbench.engine.sampling_params import SamplingParams

# Four lower-tier requests arrive first, two top-tier ones last: "newest" aims at the top.
ARRIVALS = [("mid", 1), ("bulk", 1), ("bulk", 1), ("mid", 1), ("top", 0), ("top", 0)]
# Each request grows to 8 + 40 tokens = 6 pages of 8; six of them need 36 of the 14 pages,
# while the two top-tier requests alone (12 pages) fit: pressure comes from the lower tiers.
NUM_PAGES = 14


def preemptions_by_tenant(victim_policy: str) -> dict[str, int]:
    engine = tiny_engine(
        num_pages=NUM_PAGES, victim_policy=victim_policy, scheduling_policy="priority"
    )
    sampling = SamplingParams(max_tokens=40, ignore_eos=True)
    for i, (tenant, tier) in enumerate(ARRIVALS):
        engine.add_request(list(range(3, 11)), sampling, tenant, tier, arrival_time=float(i))
    while engine.has_unfinished:
        engine.step()
    frame = engine.requests_frame()
    assert (frame["finish_reason"] == "length").all()
    return frame.groupby("tenant")["num_preemptions"].sum().to_dict()


@pytest.mark.slow
@pytest.mark.parametrize("tier_blind", ["newest", "fair-share"])
def test_tier_blind_victims_preempt_the_top_tier_under_this_pressure(tier_blind):
    # The workload puts the top tier at risk: without tiers it loses work.
    assert preemptions_by_tenant(tier_blind)["top"] > 0


@pytest.mark.slow
def test_tier_fair_share_preempts_only_lower_tiers_while_they_run():
    counts = preemptions_by_tenant("tier-fair-share")
    assert counts["top"] == 0
    assert counts["mid"] + counts["bulk"] > 0
