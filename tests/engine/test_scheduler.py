import pytest
from engine_helpers import make_request

from claimbench.engine.config import EngineConfig
from claimbench.engine.kv.block_manager import BlockManager
from claimbench.engine.request import RequestStatus
from claimbench.engine.sched.scheduler import Scheduler


def make_scheduler(num_pages=64, page_size=4, **cfg) -> Scheduler:
    defaults = dict(max_num_seqs=4, max_num_batched_tokens=16, max_model_len=64, page_size=4)
    return Scheduler(EngineConfig(**{**defaults, **cfg}), BlockManager(num_pages, page_size))


def advance(out) -> None:
    """What the engine does after a step: count computed tokens, sample when caught up."""
    for request, n in out.scheduled:
        request.num_computed_tokens += n
        if request.num_uncomputed_tokens == 0:
            request.append_output(5, 0.0, 0.0)


def test_chunked_prefill_then_decode_mixes_with_new_prefill():
    s = make_scheduler()
    a = make_request(20)
    s.add(a)
    out = s.schedule(0.0)
    assert [(r, n) for r, n in out.scheduled] == [(a, 16)]  # first chunk fills the budget
    advance(out)
    b = make_request(30)
    s.add(b)
    out = s.schedule(0.0)
    assert [(r.request_id, n) for r, n in out.scheduled] == [(a.request_id, 4), (b.request_id, 12)]
    advance(out)
    assert a.num_output_tokens == 1 and b.num_output_tokens == 0
    out = s.schedule(0.0)
    # a decodes one token; b continues its prefill with the rest of the budget.
    assert [(r.request_id, n) for r, n in out.scheduled] == [(a.request_id, 1), (b.request_id, 15)]


def test_max_num_seqs_limits_admission():
    s = make_scheduler(max_num_seqs=2)
    reqs = [make_request(2) for _ in range(3)]
    for r in reqs:
        s.add(r)
    out = s.schedule(0.0)
    assert [r for r, _ in out.scheduled] == reqs[:2]
    assert reqs[2].status is RequestStatus.WAITING


def test_fcfs_admits_by_arrival_time():
    s = make_scheduler(max_num_seqs=1)
    late, early = make_request(2, arrival=5.0), make_request(2, arrival=1.0)
    s.add(late)
    s.add(early)
    assert [r for r, _ in s.schedule(0.0).scheduled] == [early]


def test_newest_request_is_preempted_when_pages_run_out():
    # 4 usable pages of 4 tokens; two requests of 8 prompt tokens fill the pool.
    s = make_scheduler(num_pages=5)
    old, new = make_request(8, arrival=0.0), make_request(8, arrival=1.0)
    s.add(old)
    s.add(new)
    advance(s.schedule(0.0))
    assert s.block_manager.num_free_pages == 0
    out = s.schedule(0.0)  # old needs a third page for its 9th token
    assert out.preempted == [new]
    assert [r for r, _ in out.scheduled] == [old]
    assert new.status is RequestStatus.WAITING and new.num_computed_tokens == 0
    assert new.block_table == [] and new.num_preemptions == 1
    assert new.num_uncomputed_tokens == 9  # recomputes prompt + its first output


def test_request_preempts_itself_when_it_is_newest():
    s = make_scheduler(num_pages=5)
    old, new = make_request(7, arrival=0.0), make_request(8, arrival=1.0)
    s.add(old)
    s.add(new)
    advance(s.schedule(0.0))
    out = s.schedule(0.0)
    # old's 8th token fits its second page; new needs a third and, already holding the
    # only unscheduled pages, is its own victim.
    assert out.preempted == [new]
    assert [(r, n) for r, n in out.scheduled] == [(old, 1)]
    assert s.block_manager.num_free_pages == 2


def test_admit_rejects_requests_that_can_never_fit():
    s = make_scheduler(num_pages=5, max_model_len=32)
    assert "exceeds max_model_len=32" in s.admit(make_request(30, max_tokens=3))
    assert s.admit(make_request(16, max_tokens=1)) is None  # 16 tokens = the whole pool
    assert "whole pool has 4" in s.admit(make_request(16, max_tokens=2))
    assert s.admit(make_request(0)) == "empty prompt"


@pytest.mark.slow
def test_finish_frees_pages():
    s = make_scheduler()
    r = make_request(10)
    s.add(r)
    s.schedule(0.0)
    assert s.block_manager.num_used_pages == 3
    s.finish(r)
    assert s.block_manager.num_used_pages == 0 and not s.has_unfinished
