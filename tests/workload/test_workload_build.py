import dataclasses

import numpy as np
import pytest

from claimbench.workload.build import build_requests
from claimbench.workload.lengths import FixedLength, LognormalLength, UniformLength
from claimbench.workload.spec import WorkloadSpec, scale_rates
from claimbench.workload.tenants import TenantLoad
from claimbench.workload.tokens import corpus_token_source, random_token_source

VOCAB = 1000


def _load(name: str, **overrides) -> TenantLoad:
    defaults = {
        "rate": 20.0,
        "prompt_len": UniformLength(4, 12),
        "output_len": LognormalLength(median=8, sigma=0.5, lo=2, hi=20),
        "num_requests": 40,
    }
    return TenantLoad(name, **(defaults | overrides))


def _spec(**overrides) -> WorkloadSpec:
    tenants = (
        _load("a", system_prompt_len=6),
        _load("b", arrival="gamma", burstiness=0.3, priority=2),
        _load("c", arrival="constant", rate=5.0),
    )
    return WorkloadSpec(tenants, **({"seed": 3} | overrides))


def test_same_spec_same_requests_and_seed_changes_them():
    first = build_requests(_spec(), random_token_source(VOCAB))
    again = build_requests(_spec(), random_token_source(VOCAB))
    assert first == again
    other = build_requests(_spec(seed=4), random_token_source(VOCAB))
    assert [r.prompt_token_ids for r in other] != [r.prompt_token_ids for r in first]


def test_requests_are_sorted_indexed_and_carry_their_tenant():
    requests = build_requests(_spec(), random_token_source(VOCAB))
    assert len(requests) == 120
    assert [r.request_index for r in requests] == list(range(120))
    arrivals = [r.arrival_s for r in requests]
    assert arrivals == sorted(arrivals)
    assert {r.tenant: r.priority for r in requests} == {"a": 0, "b": 2, "c": 0}
    for r in requests:
        own_len = r.prompt_len - (6 if r.tenant == "a" else 0)
        assert 4 <= own_len <= 12 and 2 <= r.max_tokens <= 20
        assert all(isinstance(t, int) and 0 <= t < VOCAB for t in r.prompt_token_ids)


def test_system_prompt_shared_within_tenant_distinct_across():
    spec = WorkloadSpec(
        (
            _load("a", system_prompt_len=8),
            _load("b", system_prompt_len=8),
            _load("c", system_prompt_len=8, system_prompt_group="g"),
            _load("d", system_prompt_len=5, system_prompt_group="g"),
        )
    )
    requests = build_requests(spec, random_token_source(VOCAB))
    system_len = {t.tenant: t.system_prompt_len for t in spec.tenants}
    prefixes: dict[str, set] = {}
    for r in requests:
        prefixes.setdefault(r.tenant, set()).add(r.prompt_token_ids[: system_len[r.tenant]])
    # Within a tenant the first system_prompt_len tokens are identical...
    assert {t: len(v) for t, v in prefixes.items()} == {"a": 1, "b": 1, "c": 1, "d": 1}
    system = {t: next(iter(v)) for t, v in prefixes.items()}
    # ...across ungrouped tenants they differ, and a group shares one (d's is a prefix of c's).
    assert system["a"] != system["b"] and system["a"][:5] != system["c"][:5]
    assert system["c"][:5] == system["d"][:5]
    # The request's own tokens after the system prompt still vary.
    assert len({r.prompt_token_ids[8:12] for r in requests if r.tenant == "a"}) > 1


def test_run_bounds_apply_at_build_time():
    by_count = build_requests(_spec(max_requests=25), random_token_source(VOCAB))
    full = build_requests(_spec(), random_token_source(VOCAB))
    assert by_count == full[:25]
    by_time = build_requests(_spec(max_duration_s=1.0), random_token_source(VOCAB))
    assert by_time and max(r.arrival_s for r in by_time) < 1.0
    assert [r.prompt_token_ids for r in by_time] == [
        r.prompt_token_ids for r in full if r.arrival_s < 1.0
    ]


def test_duration_bounded_tenant_and_global_count_bound():
    spec = WorkloadSpec(
        (
            _load("a", num_requests=None, duration_s=None),
            _load("b", num_requests=None, duration_s=2.0),
        ),
        max_requests=30,
    )
    requests = build_requests(spec, random_token_source(VOCAB))
    assert len(requests) == 30
    assert all(r.arrival_s < 2.0 for r in requests if r.tenant == "b")


def test_scaling_rate_moves_arrivals_but_keeps_requests():
    spec = _spec()
    base = build_requests(spec, random_token_source(VOCAB))
    fast = build_requests(scale_rates(spec, 4.0), random_token_source(VOCAB))

    def by_tenant(requests):
        return {
            t: [(r.arrival_s, r.prompt_token_ids, r.max_tokens) for r in requests if r.tenant == t]
            for t in "abc"
        }

    slow_t, fast_t = by_tenant(base), by_tenant(fast)
    for t in "abc":
        assert [x[1:] for x in slow_t[t]] == [x[1:] for x in fast_t[t]]
        np.testing.assert_allclose([x[0] / 4 for x in slow_t[t]], [x[0] for x in fast_t[t]])


def test_changing_output_lengths_leaves_arrivals_and_prompts():
    spec = _spec()
    tenants = tuple(dataclasses.replace(t, output_len=FixedLength(3)) for t in spec.tenants)
    changed = build_requests(dataclasses.replace(spec, tenants=tenants), random_token_source(VOCAB))
    base = build_requests(spec, random_token_source(VOCAB))
    assert [(r.arrival_s, r.prompt_token_ids) for r in changed] == [
        (r.arrival_s, r.prompt_token_ids) for r in base
    ]
    assert {r.max_tokens for r in changed} == {3}


def test_corpus_token_source_cuts_windows():
    corpus = np.arange(100, 400, dtype=np.int32)
    source = corpus_token_source(corpus)
    window = source(np.random.default_rng(0), 50)
    assert len(window) == 50 and all(type(t) is int for t in window)
    # Consecutive ids from the corpus: a window starts anywhere and runs contiguously.
    assert window == list(range(window[0], window[0] + 50))
    assert source(np.random.default_rng(0), 300) == corpus.tolist()
    requests = build_requests(_spec(), source)
    assert all(100 <= t < 400 for r in requests for t in r.prompt_token_ids)
    with pytest.raises(ValueError, match="a 301-token prompt is longer than the 300-token corpus"):
        source(np.random.default_rng(0), 301)
    with pytest.raises(ValueError, match="non-empty 1-D integer array"):
        corpus_token_source(np.zeros((2, 3), dtype=np.int32))


def test_misbehaving_token_source_is_reported():
    def short(rng, length):
        return [1] * (length - 1)

    with pytest.raises(ValueError, match=r"token source gave .* shape \(\d+,\) for tenant 'a'"):
        build_requests(_spec(), short)
