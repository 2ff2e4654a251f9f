import jax
import numpy as np
import pytest
from engine_helpers import dense_logits, shared_tiny_engine, tiny_engine, tiny_model

from claimbench.engine.outputs import FinishEvent, RejectEvent, TokenEvent
from claimbench.engine.sampling_params import SamplingParams

GREEDY = SamplingParams(max_tokens=12, ignore_eos=True)


def prompts(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 97, size=n).tolist() for n in lengths]


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.fixture
def engine():
    return shared_tiny_engine()


def test_greedy_tokens_are_the_dense_models_argmax(engine, model):
    # 45 tokens: a prefill chunked over two steps, crossing page boundaries.
    for p, out in zip(prompts([45, 3]), engine.generate(prompts([45, 3]), GREEDY), strict=True):
        assert out.finish_reason == "length" and len(out.token_ids) == 12
        logits = dense_logits(model, p + out.token_ids)[len(p) - 1 : -1]
        chosen = logits[np.arange(12), out.token_ids]
        np.testing.assert_allclose(chosen, logits.max(-1), atol=1e-4)


def test_greedy_output_does_not_depend_on_the_batch(engine):
    target = prompts([21], seed=1)[0]
    alone = engine.generate([target], GREEDY)[0].token_ids
    crowd = prompts([5, 40, 17, 2, 33, 9], seed=2)
    mixed = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (3, 20, 7, 12, 1, 15)]
    outs = engine.generate([*crowd[:3], target, *crowd[3:]], [*mixed[:3], GREEDY, *mixed[3:]])
    assert outs[3].token_ids == alone


def test_greedy_output_survives_preemption(engine):
    # 63 usable pages of 8 tokens; six requests of up to 16 pages each cannot all fit.
    batch = prompts([90, 85, 80, 75, 70, 65], seed=3)
    params = SamplingParams(max_tokens=30, ignore_eos=True)
    expected = [engine.generate([p], params)[0].token_ids for p in batch]
    preemptions_before = engine.requests_frame()["num_preemptions"].sum()
    outs = engine.generate(batch, params)
    assert [o.token_ids for o in outs] == expected
    assert engine.requests_frame()["num_preemptions"].sum() > preemptions_before
    assert engine.block_manager.num_used_pages == 0


def test_seeded_sampling_does_not_depend_on_the_batch(engine):
    hot = SamplingParams(max_tokens=10, temperature=1.5, top_k=20, top_p=0.9, seed=123)
    target = prompts([14], seed=4)[0]
    alone = engine.generate([target], hot)[0].token_ids
    others = prompts([30, 6], seed=5)
    outs = engine.generate([others[0], target, others[1]], [GREEDY, hot, hot])
    assert outs[1].token_ids == alone
    assert outs[2].token_ids != alone  # same seed, different prompt


def test_prompt_logprobs_through_chunked_prefill(engine, model):
    p = prompts([70], seed=6)[0]  # three chunks of the 32-token budget
    out = engine.generate([p], SamplingParams(max_tokens=2, prompt_logprobs=True, logprobs=True))[0]
    logp = jax.nn.log_softmax(dense_logits(model, p + out.token_ids), axis=-1)
    expected = logp[np.arange(69), p[1:]]
    np.testing.assert_allclose(out.prompt_logprobs, expected, atol=1e-4)
    np.testing.assert_allclose(out.logprobs, logp[[69, 70], out.token_ids], atol=1e-4)


def test_unservable_requests_are_rejected_and_the_rest_served(engine):
    ok = engine.add_request([5, 6, 7], GREEDY)
    too_long = engine.add_request([5] * 117, SamplingParams(max_tokens=20))
    bad_token = engine.add_request([5, 1000], GREEDY)
    events = engine.step()
    rejects = {e.request_id: e.reason for e in events if isinstance(e, RejectEvent)}
    assert "exceeds max_model_len=128" in rejects[too_long]
    assert "outside the vocabulary" in rejects[bad_token]
    while engine.has_unfinished:
        events += engine.step()
    finished = [e for e in events if isinstance(e, FinishEvent)]
    assert [(e.request_id, e.reason) for e in finished] == [(ok, "length")]
    assert engine.output(too_long).finish_reason == "rejected"


def test_stop_tokens_eos_and_abort(engine):
    p = prompts([10], seed=7)[0]
    free_run = engine.generate([p], GREEDY)[0].token_ids
    stop_at = free_run[4]
    out = engine.generate([p], SamplingParams(max_tokens=12, stop_token_ids=(stop_at,)))[0]
    assert out.finish_reason == "stop"
    assert out.token_ids == free_run[: free_run.index(stop_at) + 1]
    rid = engine.add_request(p, GREEDY)
    engine.step()
    engine.abort(rid)
    assert engine.output(rid).finish_reason == "abort"
    assert engine.block_manager.num_used_pages == 0
    # The abort's FinishEvent is still owed to the next step() caller.
    assert engine.has_unfinished
    assert [type(e) for e in engine.step()] == [FinishEvent]
    assert not engine.has_unfinished


def test_events_carry_monotonic_timestamps(engine):
    rid = engine.add_request(prompts([9], seed=8)[0], SamplingParams(max_tokens=4, ignore_eos=True))
    events = []
    while engine.has_unfinished:
        events += engine.step()
    tokens = [e for e in events if isinstance(e, TokenEvent) and e.request_id == rid]
    assert [e.index for e in tokens] == [0, 1, 2, 3]
    times = [e.time_s for e in tokens]
    assert times == sorted(times) and len(set(times)) == 4


@pytest.mark.slow
@pytest.mark.parametrize("kv_dtype", ["int8", "fp8"])
def test_quantized_kv_cache_serves_close_to_f32(model, engine, kv_dtype):
    p = prompts([30], seed=9)[0]  # one chunk: one executable per cache dtype
    params = SamplingParams(max_tokens=1, prompt_logprobs=True)
    exact = engine.generate([p], params)[0].prompt_logprobs
    quant = tiny_engine(model, kv_dtype=kv_dtype).generate([p], params)[0].prompt_logprobs
    # A random tiny model's logits barely move with the small KV rounding error.
    np.testing.assert_allclose(quant, exact, atol=0.05)
