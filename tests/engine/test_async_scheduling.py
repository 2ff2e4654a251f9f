"""Async scheduling: the next step is built and dispatched before the current one's tokens are
read, and what a client sees (tokens, finishes, events) is exactly the synchronous engine's."""

from __future__ import annotations

from dataclasses import replace

import jax
import numpy as np
import pytest
from engine_helpers import tiny_engine, tiny_model

from claimbench.engine import config
from claimbench.engine.config import EngineConfig
from claimbench.engine.outputs import FinishEvent, RejectEvent, TokenEvent
from claimbench.engine.sampling_params import SamplingParams
from claimbench.engine.sched.async_sched import PLACEHOLDER

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


@pytest.fixture(scope="module")
def engines():
    """One engine per mode; a 12-page pool (96 tokens) so eight long requests preempt."""
    model = tiny_model()
    return {
        mode: tiny_engine(model, async_scheduling=mode == "on", num_pages=12)
        for mode in ("off", "on")
    }


def _prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 97, size=int(rng.integers(3, 20))).tolist() for _ in range(n)]


def serve(engine, prompts, sampling, abort_after=None):
    """Step to completion; abort request i once its token ``abort_after[i]`` arrives (as a
    server does on a stop string). Returns (token ids per request, finish reason per request,
    every event in order)."""
    engine.reset()
    abort_after = abort_after or {}
    ids = [engine.add_request(p, s) for p, s in zip(prompts, sampling, strict=True)]
    index = {rid: i for i, rid in enumerate(ids)}
    events = []
    while engine.has_unfinished:
        for event in engine.step():
            events.append(event)
            i = index[event.request_id]
            if isinstance(event, TokenEvent) and abort_after.get(i) == event.index:
                engine.abort(event.request_id, "abort")
    tokens = [engine.output(r).token_ids for r in ids]
    reasons = [engine.output(r).finish_reason for r in ids]
    return tokens, reasons, events


def stream_of(events, num_requests: int, ids_order: list[str]):
    """Per request: its token events' (index, token) in arrival order, and whether any
    event followed its finish."""
    streams: dict[str, list[tuple[int, int]]] = {r: [] for r in ids_order}
    finished: set[str] = set()
    late = []
    for event in events:
        if event.request_id in finished:
            late.append(event)
        if isinstance(event, TokenEvent):
            streams[event.request_id].append((event.index, event.token_id))
        elif isinstance(event, FinishEvent | RejectEvent):
            finished.add(event.request_id)
    return [streams[r] for r in ids_order], late


def _both(engines, prompts, sampling, abort_after=None):
    results = {m: serve(engines[m], prompts, sampling, abort_after) for m in ("off", "on")}
    ids = [f"req-{i}" for i in range(len(prompts))]
    (tok_off, why_off, ev_off), (tok_on, why_on, ev_on) = results["off"], results["on"]
    assert tok_on == tok_off
    assert why_on == why_off
    streams_off, late_off = stream_of(ev_off, len(prompts), ids)
    streams_on, late_on = stream_of(ev_on, len(prompts), ids)
    assert late_off == [] and late_on == []  # no event after a finish
    assert streams_on == streams_off
    # Every emitted token is an output token, in order, and no placeholder ever leaks.
    for stream, tokens in zip(streams_on, tok_on, strict=True):
        assert stream == list(enumerate(tokens))
        assert PLACEHOLDER not in tokens
    return results


@pytest.mark.slow
def test_greedy_and_seeded_outputs_match_with_stops_lengths_and_preemption(engines):
    prompts = _prompts(10)
    lengths = [5, 30, 12, 40, 3, 25, 18, 33, 9, 28]
    free = [SamplingParams(max_tokens=n, ignore_eos=True) for n in lengths]
    tokens, _, _ = serve(engines["off"], prompts, free)
    # Each even request stops at the token it produced at index 4 (if it reaches it).
    sampling = [
        SamplingParams(
            max_tokens=n,
            ignore_eos=True,
            stop_token_ids=(tokens[i][4],) if i % 2 == 0 and n > 4 else (),
            # Two seeded sampled requests: their keys depend on (seed, output index) alone.
            temperature=1.0 if i in (3, 7) else 0.0,
            seed=11 * i if i in (3, 7) else None,
            logprobs=i == 5,
        )
        for i, n in enumerate(lengths)
    ]
    results = _both(engines, prompts, sampling)
    tok_on, why_on, _ = results["on"]
    assert {"stop", "length"} <= set(why_on)
    steps_on = engines["on"].steps_frame()
    steps_off = engines["off"].steps_frame()
    # The workload preempts (recompute) in both modes, and the overlapped run read every
    # step one call late.
    assert steps_off["num_preempted"].sum() > 0 and steps_on["num_preempted"].sum() > 0
    assert steps_on["overlapped"].all() and not steps_off["overlapped"].any()
    # A stop is seen only after the next step was dispatched: its token there is discarded.
    assert steps_on["num_discarded"].sum() > 0
    # Batches are composed differently (admissions lag a step), so only rounding may differ.
    np.testing.assert_allclose(
        engines["on"].output("req-5").logprobs, engines["off"].output("req-5").logprobs, atol=1e-5
    )


def test_length_finishes_are_left_out_of_the_next_step(engines):
    """A request that the in-flight step ends by length is known in advance: it is not
    scheduled again, so nothing is discarded and the steps are the synchronous ones."""
    prompts = _prompts(4, seed=3)
    sampling = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (1, 4, 9, 16)]
    _both(engines, prompts, sampling)
    on, off = engines["on"].steps_frame(), engines["off"].steps_frame()
    assert on["num_discarded"].sum() == 0
    assert on["num_seqs"].tolist() == off["num_seqs"].tolist()
    assert on["num_scheduled_tokens"].tolist() == off["num_scheduled_tokens"].tolist()


def test_aborts_mid_stream_emit_nothing_after_and_match(engines):
    prompts = _prompts(6, seed=4)
    sampling = [SamplingParams(max_tokens=20, ignore_eos=True)] * 6
    # Abort as a stop string would: right after a given token arrives.
    results = _both(engines, prompts, sampling, abort_after={0: 0, 2: 5, 5: 11})
    tokens, reasons, _ = results["on"]
    assert [len(tokens[i]) for i in (0, 2, 5)] == [1, 6, 12]
    assert [reasons[i] for i in (0, 2, 5)] == ["abort"] * 3
    assert engines["on"].steps_frame()["num_discarded"].sum() >= 3


def test_next_step_is_dispatched_before_the_current_tokens_are_read(engines, monkeypatch):
    """The mechanism: when a decode step is dispatched, the request's newest output is still
    a placeholder (its token lives only on the device, fed in by the device-side merge)."""
    engine = engines["on"]
    engine.reset()
    rid = engine.add_request([5, 6, 7], SamplingParams(max_tokens=6, ignore_eos=True))
    request = engine.requests[rid]
    seen = []
    execute = engine.runner.execute

    def spy(inputs, prompt_logprobs):
        outputs = request.output_token_ids
        seen.append(bool(outputs) and outputs[-1] == PLACEHOLDER)
        return execute(inputs, prompt_logprobs)

    monkeypatch.setattr(engine.runner, "execute", spy)
    while engine.has_unfinished:
        engine.step()
    # The prefill step has nothing in flight before it; each of the 5 decode steps does.
    assert seen == [False] + [True] * 5
    assert (
        engine.output(rid).token_ids
        == engines["off"]
        .generate([[5, 6, 7]], SamplingParams(max_tokens=6, ignore_eos=True))[0]
        .token_ids
    )


def test_prompt_logprobs_steps_complete_in_their_own_call(engines):
    prompts = _prompts(3, seed=5)
    sampling = [
        SamplingParams(max_tokens=6, ignore_eos=True, prompt_logprobs=i == 1) for i in range(3)
    ]
    _both(engines, prompts, sampling)
    on, off = engines["on"], engines["off"]
    np.testing.assert_allclose(
        on.output("req-1").prompt_logprobs, off.output("req-1").prompt_logprobs, atol=1e-5
    )
    # The prefill that asked for them was read synchronously; the decode steps overlapped.
    steps = on.steps_frame()
    assert not steps["overlapped"].iloc[0] and steps["overlapped"].iloc[1:].all()


def test_reset_drops_a_step_in_flight(engines):
    engine = engines["on"]
    engine.reset()
    engine.add_request([5, 6, 7], SamplingParams(max_tokens=8, ignore_eos=True))
    engine.step()
    assert engine._overlap.inflight is not None
    engine.reset()
    assert not engine.has_unfinished and engine._overlap.inflight is None
    out = engine.generate([[5, 6, 7]], SamplingParams(max_tokens=3, ignore_eos=True))[0]
    assert len(out.token_ids) == 3


def test_sync_records_split_host_device_and_blocked_time(engines):
    engine = engines["off"]
    serve(engine, _prompts(4, seed=6), [SamplingParams(max_tokens=8, ignore_eos=True)] * 4)
    steps = engine.steps_frame()
    # Waiting is a part of the device span (dispatch to ready), never of host work.
    assert (steps["host_blocked_s"] <= steps["device_s"]).all()
    assert (steps["host_s"] > 0).all()


def test_mode_resolution_and_validation(monkeypatch):
    # None takes the platform's measured default from one table: off everywhere today, and
    # a platform the table marks on resolves on.
    assert EngineConfig().scheduler.async_scheduling is None
    assert tiny_engine().async_scheduling is False
    for platform in ("cpu", "gpu", "tpu"):
        assert EngineConfig().resolved_async_scheduling(platform) is False
    monkeypatch.setitem(config.ASYNC_SCHEDULING_DEFAULT, "cpu", True)
    assert EngineConfig().resolved_async_scheduling("cpu") is True
    assert tiny_engine().async_scheduling is True
    assert EngineConfig().resolved_async_scheduling("gpu") is False
    assert EngineConfig(async_scheduling=False).resolved_async_scheduling("cpu") is False
    assert EngineConfig(async_scheduling=True).resolved_async_scheduling("gpu") is True
    assert tiny_engine(async_scheduling=False).async_scheduling is False
    assert tiny_engine(async_scheduling=True, speculative="ngram").async_scheduling is False
    # YAML reads a bare `on` as true; a string is refused rather than taken as truthy.
    with pytest.raises(ValueError, match="async_scheduling must be true, false or None"):
        EngineConfig(async_scheduling="on")


def test_prefix_cache_hits_match(engines):
    """Requests sharing a 32-token prefix: later ones take the cached pages by reference."""
    shared = list(range(10, 42))
    prompts = [shared + [50 + i, 60 + i] for i in range(6)]
    _both(engines, prompts, [SamplingParams(max_tokens=10, ignore_eos=True)] * 6)
    for mode in ("off", "on"):
        assert (engines[mode].requests_frame()["prefix_hit_tokens"] > 0).any()


@pytest.mark.slow
def test_stop_strings_cut_the_same_text_and_nothing_follows():
    """The server's stop strings (OutputAssembler, abort on a match) over the shipped model
    and tokenizer: the same text is sent with async scheduling on and off, and no token of
    a request arrives after its stop."""
    from claimbench.engine.build import build_engine
    from claimbench.serving.api.generation import OutputAssembler

    config = EngineConfig(
        dtype="float32",
        max_model_len=128,
        max_num_seqs=8,
        max_num_batched_tokens=64,
        kv_pool_bytes=4 * 2**20,
    )
    engine = build_engine(config)
    prompts = ["def add(a, b):", "import numpy as np\n", "The capital of France", "1, 2, 3,"]
    sampling = SamplingParams(max_tokens=40, ignore_eos=True)

    def serve_text(on: bool, stops: list[list[str]]) -> tuple[list[str], list]:
        engine.reset(replace(config, async_scheduling=on))
        ids = [engine.add_request(p, sampling) for p in prompts]
        pairs = zip(ids, stops, strict=True)
        assemblers = {r: OutputAssembler(engine.tokenizer, s) for r, s in pairs}
        texts = dict.fromkeys(ids, "")
        late = []
        while engine.has_unfinished:
            for event in engine.step():
                asm = assemblers[event.request_id]
                if not isinstance(event, TokenEvent):
                    continue
                if asm.stopped:
                    late.append(event)
                    continue
                texts[event.request_id] += asm.push(event.token_id)
                if asm.stopped:
                    engine.abort(event.request_id)
        return [texts[r] + assemblers[r].finish() for r in ids], late

    full, _ = serve_text(False, [[] for _ in prompts])
    # Each request's stop string: 4 characters from the middle of its own output.
    stops = [[text[len(text) // 2 : len(text) // 2 + 4]] for text in full]
    off, late_off = serve_text(False, stops)
    on, late_on = serve_text(True, stops)
    assert on == off and late_on == [] and late_off == []
    for text, stop, whole in zip(on, stops, full, strict=True):
        assert text == whole[: whole.index(stop[0])]


def test_precompile_covers_the_token_merge_and_the_steps_it_feeds():
    """With overlap, precompile also compiles the device-side token merge at every shape, and
    every step taking merged ids (a device array, another jit signature than the host's
    numpy ids), so serving never compiles (here: a batch that shrinks from 8 sequences to 1)."""
    from claimbench.engine.worker.token_merge import merge_token_ids

    engine = tiny_engine(async_scheduling=True)
    engine.precompile()
    before = merge_token_ids._cache_size(), engine.runner.num_compilations
    compiles = []

    def listener(event, duration, **kwargs):
        if event == BACKEND_COMPILE:
            compiles.append(duration)

    sampling = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (2, 3, 4, 5, 6, 7, 8, 20)]
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        engine.generate(_prompts(8, seed=7), sampling)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert engine.steps_frame()["num_seqs"].nunique() > 4
    assert (merge_token_ids._cache_size(), engine.runner.num_compilations) == before
    assert compiles == []


@pytest.mark.slow
def test_precompile_with_prompt_logprobs_covers_their_merged_steps():
    """A request asking for prompt log-probs that arrives while others decode runs in a step
    whose ids were merged on the device: precompile(prompt_logprobs=True) compiled it."""
    engine = tiny_engine(async_scheduling=True)
    engine.precompile(prompt_logprobs=True)
    before = engine.runner.num_compilations
    greedy = SamplingParams(max_tokens=12, ignore_eos=True)
    for prompt in _prompts(3, seed=3):
        engine.add_request(prompt, greedy)
    for _ in range(3):
        engine.step()
    asking = SamplingParams(max_tokens=2, ignore_eos=True, prompt_logprobs=True)
    request_id = engine.add_request(_prompts(1, seed=4)[0], asking)
    while engine.has_unfinished:
        engine.step()
    assert None not in engine.requests[request_id].prompt_logprobs
    steps = engine.steps_frame()
    assert ((steps["num_prefill_seqs"] > 0) & (steps["num_decode_seqs"] > 0)).any()
    assert engine.runner.num_compilations == before


def test_the_stepper_does_not_reach_back_into_the_engine():
    """async_sched.py works on the scheduler, the runner and the step updater it is handed,
    and returns the steps it read: no import of engine.py, no engine to call back into."""
    import ast
    from pathlib import Path

    from claimbench.engine.sched import async_sched

    tree = ast.parse(Path(async_sched.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "claimbench.engine.engine" not in imported
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert "engine" not in names | attrs
