"""The engine's public surface for the layers above: a rejection's event (with its
retry-after) read at once, and build_engine's unsharded baseline."""

from __future__ import annotations

import dataclasses

import pytest
from engine_helpers import shared_tiny_engine, tiny_engine, tiny_model

from claimbench.engine.build import build_engine
from claimbench.engine.config import EngineConfig
from claimbench.engine.config_tenants import Tenant
from claimbench.engine.outputs import RejectEvent, RejectKind
from claimbench.engine.sampling_params import SamplingParams

SIX = SamplingParams(max_tokens=6, ignore_eos=True)


def test_a_rejection_carries_its_retry_after_and_is_read_at_once():
    # 20-token bucket refilled at 2/s; each request costs prompt + max_tokens.
    engine = tiny_engine(tenants=(Tenant("limited", token_rate=2.0, token_burst=20.0),))
    admitted = engine.add_request([5, 6, 7], SIX, tenant="limited", arrival_time=0.0)  # 9
    # At t=0.5 the bucket holds 20 - 9 + 0.5 * 2 = 12 tokens: 13 do not fit.
    limited = engine.add_request([5] * 7, SIX, tenant="limited", arrival_time=0.5)
    too_long = engine.add_request([5] * 125, SIX, tenant="t")
    assert engine.rejection(admitted) is None
    over = engine.rejection(limited)
    assert over.kind == RejectKind.OVER_LIMIT and "token_rate" in over.reason
    # One token short, refilled at 2 per second.
    assert over.retry_after_s == pytest.approx(0.5)
    never = engine.rejection(too_long)
    assert never.kind == RejectKind.INVALID and never.retry_after_s is None
    # The same events are what the next step reports.
    reported = [e for e in engine.step() if isinstance(e, RejectEvent)]
    assert reported == [over, never]
    with pytest.raises(ValueError, match="no request 'req-99'"):
        engine.rejection("req-99")


@pytest.mark.slow
def test_build_engine_unsharded_is_the_baseline_placement():
    cfg = EngineConfig(dtype="float32", max_num_seqs=8, max_num_batched_tokens=32, max_model_len=64)
    sharded = build_engine(cfg, model=tiny_model())
    baseline = build_engine(cfg, model=tiny_model(), unsharded=True)
    # tp=1 still goes through a one-device mesh; the baseline has none.
    assert sharded.runner.tp is not None and baseline.runner.tp is None
    assert baseline.describe()["tp"] == 1
    assert baseline.runner.num_pages == sharded.runner.num_pages
    prompts, greedy = [[5, 6, 7, 8], [9, 10]], SamplingParams(max_tokens=4, ignore_eos=True)
    outs = [e.generate(prompts, greedy) for e in (sharded, baseline)]
    assert [o.token_ids for o in outs[0]] == [o.token_ids for o in outs[1]]
    with pytest.raises(ValueError, match="unsharded places the model on one device"):
        build_engine(dataclasses.replace(cfg, tp=2), model=tiny_model(), unsharded=True)


@pytest.mark.parametrize(
    "tenant",
    [
        Tenant("capped", max_queued_tokens=12),
        Tenant("capped", token_rate=2.0, token_burst=12.0),
    ],
    ids=["max_queued_tokens", "token_burst"],
)
def test_a_request_its_tenant_limits_can_never_admit_is_invalid_not_over_limit(tenant):
    # prompt + max_tokens = 13 tokens exceed the 12 the limit holds even with nothing else
    # queued and the bucket full: no retry can pass, so it is not refused "for now".
    engine = shared_tiny_engine(tenants=(tenant,))
    never = engine.rejection(engine.add_request([5] * 7, SIX, tenant="capped"))
    assert never.kind == RejectKind.INVALID and never.retry_after_s is None
    assert "can never" in never.reason and "12" in never.reason
    assert engine.scheduler.admission.total_rejected == 0  # no limit refused it for now
    # One token less fits, and is admitted.
    assert engine.rejection(engine.add_request([5] * 6, SIX, tenant="capped")) is None
