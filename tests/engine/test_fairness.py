import dataclasses

import numpy as np
import pandas as pd
import pytest
from engine_helpers import make_request, shared_tiny_engine

from claimbench.engine.sched.fairness import ServiceLedger, service_tokens
from claimbench.lab.load.step_driver import serve_by_step
from claimbench.lab.metrics.service import cumulative_service, max_service_gap, steps_backlog
from claimbench.workload.build import WorkloadRequest


def test_service_tokens_prefill_decode_and_recompute():
    r = make_request(10)
    assert service_tokens(r, 6) == (6, 0)  # first chunk: no sample yet
    r.num_computed_tokens = 6
    assert service_tokens(r, 4) == (4, 1)  # last chunk samples the first output
    r.num_computed_tokens = 10
    r.append_output(5, 0.0, 0.0)
    r.append_output(6, 0.0, 0.0)
    r.num_computed_tokens = 11
    assert service_tokens(r, 1) == (0, 1)  # a decode step
    r.num_computed_tokens = 0  # preempted: recompute prompt + first output, feed the second
    assert service_tokens(r, 12) == (11, 1)
    with pytest.raises(ValueError, match="cannot schedule 13 tokens with 12 uncomputed"):
        service_tokens(r, 13)


def test_ledger_columns_hold_cumulative_totals_per_step():
    ledger = ServiceLedger()
    ledger.charge("a", 8, 1)
    ledger.record_step({"a", "b"}, running_tokens=9)
    ledger.charge("b", 4, 0)
    ledger.charge("a", 0, 1)
    ledger.record_step({"b"}, running_tokens=14)
    frame = ledger.columns()
    assert list(frame["input_tokens.a"]) == [8, 8] and list(frame["output_tokens.a"]) == [1, 2]
    assert list(frame["input_tokens.b"]) == [0, 4]
    assert list(frame["backlogged.a"]) == [True, False]
    assert list(frame["running_tokens"]) == [9, 14]
    service = cumulative_service(frame, input_weight=1.0, output_weight=2.0)
    assert list(service["a"]) == [10.0, 12.0] and list(service["b"]) == [0.0, 4.0]


def frame(a, b, backlog_a, backlog_b):
    """Steps frame from cumulative input tokens of two tenants (no outputs)."""
    return pd.DataFrame(
        {
            "input_tokens.a": a,
            "output_tokens.a": [0] * len(a),
            "backlogged.a": backlog_a,
            "input_tokens.b": b,
            "output_tokens.b": [0] * len(b),
            "backlogged.b": backlog_b,
        }
    )


def gap(steps):
    service = cumulative_service(steps, input_weight=1.0, output_weight=2.0)
    return max_service_gap(service, steps_backlog(steps))


def test_gap_is_the_range_of_the_service_difference_within_joint_backlog():
    # Per-step service a: 5 5 0 0 ; b: 0 0 5 5 -> difference runs 5, 10, 5, 0: range 10.
    steps = frame([5, 10, 10, 10], [0, 0, 5, 10], [True] * 4, [True] * 4)
    assert gap(steps) == 10.0


def test_gap_ignores_service_while_a_tenant_is_not_backlogged():
    # a alone is backlogged for the first two steps: its head start is not unfair.
    steps = frame([5, 10, 11, 12], [0, 0, 1, 3], [True] * 4, [False, False, True, True])
    assert gap(steps) == 1.0  # joint steps: a +1 +1, b +1 +2 -> differences 0, -1


def test_gap_restarts_after_a_break_in_joint_backlog():
    steps = frame([3, 3, 3, 9], [0, 0, 0, 0], [True, True, False, True], [True] * 4)
    assert gap(steps) == 6.0  # the 3 before the break and the 6 after are separate intervals


def test_gap_with_one_tenant_is_zero():
    steps = pd.DataFrame(
        {"input_tokens.a": [1, 2], "output_tokens.a": [0, 0], "backlogged.a": [True, True]}
    )
    assert gap(steps) == 0.0
    assert np.isfinite(gap(steps))


# -- the mechanism on a real engine, in steps ------------------------------------------


def backlogged_two_tenant_load():
    """Both tenants overload the engine together: each step 2 heavy and 1 light request
    arrive (the tiny engine serves about one 8 + 8 token request per step), for 24 steps."""
    arrivals = []
    for step in range(24):
        for tenant in ("heavy", "heavy", "light"):
            request = WorkloadRequest(0.0, tenant, 0, tuple(range(3, 11)), 8, len(arrivals))
            arrivals.append((step, request))
    return arrivals


def gap_and_bound(run, w_in=1.0, w_out=2.0):
    service = cumulative_service(run.steps, input_weight=w_in, output_weight=w_out)
    gap = max_service_gap(service, steps_backlog(run.steps))
    bound = 2 * max(w_in * 8, w_out * float(run.steps["running_tokens"].max()))
    return gap, bound


@pytest.mark.slow
def test_vtc_keeps_the_gap_within_its_bound_where_fcfs_lets_it_grow():
    engine = shared_tiny_engine()
    gaps = {}
    for policy in ("fcfs", "vtc"):
        config = dataclasses.replace(engine.config, scheduling_policy=policy)
        run = serve_by_step(engine, backlogged_two_tenant_load(), max_steps=400, config=config)
        assert (run.requests["finish_reason"] == "length").all()
        gaps[policy] = gap_and_bound(run)
    (fcfs_gap, fcfs_bound), (vtc_gap, vtc_bound) = gaps["fcfs"], gaps["vtc"]
    assert vtc_gap <= vtc_bound
    # FCFS serves 2:1 in arrival order, so the gap grows with the joint backlog; VTC
    # equalises service and its gap stays a few requests' worth.
    assert fcfs_gap > 4 * vtc_gap
    assert fcfs_gap > fcfs_bound
