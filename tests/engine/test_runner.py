import jax
import jax.numpy as jnp
import numpy as np
import pytest
from engine_helpers import make_request, tiny_engine, tiny_model

from claimbench.engine.config import EngineConfig
from claimbench.engine.kv.block_manager import BlockManager
from claimbench.engine.sampling_params import SamplingParams
from claimbench.engine.worker.batch import build_step
from claimbench.engine.worker.buckets import bucket_pairs, pick_pair, power_of_two_buckets
from claimbench.kernels.metadata import NULL_PAGE
from claimbench.serving.clients.replay import WorkItem, replay

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


def test_buckets_are_powers_of_two_capped_by_the_maximum():
    assert power_of_two_buckets(16, 512) == (16, 32, 64, 128, 256, 512)
    assert power_of_two_buckets(16, 100) == (16, 32, 64, 100)
    assert power_of_two_buckets(8, 4) == (4,)
    cfg = EngineConfig(max_num_seqs=32, max_num_batched_tokens=64)
    # tokens (16, 32, 64) x seqs (8, 16, 32), keeping seqs <= tokens: 2 + 3 + 3.
    assert len(bucket_pairs(cfg)) == 8
    assert all(s <= t for t, s in bucket_pairs(cfg))
    assert pick_pair(cfg, 17, 3) == (32, 8)
    assert pick_pair(cfg, 20, 20) == (32, 32)
    with pytest.raises(ValueError, match="exceeds the largest bucket 64"):
        pick_pair(cfg, 65, 1)


def test_build_step_orders_decode_prefill_mixed_and_pads_into_the_null_page():
    cfg = EngineConfig(page_size=4, max_num_seqs=8, max_num_batched_tokens=32, max_model_len=32)
    bm = BlockManager(32, 4)
    mixed, prefill, decode = make_request(9), make_request(3), make_request(6)
    # decode has one token left (its sixth); mixed has 4 of 9 cached.
    for r, num_computed in ((decode, 5), (mixed, 4)):
        bm.allocate(r, num_computed)
        r.num_computed_tokens = num_computed
    scheduled = [(mixed, 5), (prefill, 3), (decode, 1)]
    for r, n in scheduled:
        bm.allocate(r, n)
    plan = build_step(cfg, scheduled)
    md, x = plan.inputs.md, plan.inputs
    assert plan.requests == [decode, prefill, mixed]
    assert (plan.token_bucket, plan.seq_bucket) == (16, 8)
    assert md.distribution.tolist() == [1, 2, 3] and md.num_seqs.tolist() == [3]
    assert md.cu_q_lens.tolist() == [0, 1, 4, 9, 9, 9, 9, 9, 9]
    assert md.kv_lens.tolist() == [6, 3, 9, 0, 0, 0, 0, 0]
    assert x.positions[:9].tolist() == [5, 0, 1, 2, 4, 5, 6, 7, 8]
    assert x.token_ids[:9].tolist() == [8, 3, 4, 5, 7, 8, 9, 10, 11]
    assert x.logits_indices[:3, 0].tolist() == [0, 3, 8]
    # Token 5 of the decode request is slot 1 of its second page.
    assert x.md.slot_mapping[0] == decode.block_table[1] * 4 + 1
    assert (md.slot_mapping[9:] // 4 == NULL_PAGE).all()
    assert (md.page_indices[3:] == NULL_PAGE).all()
    assert md.page_indices[2, :3].tolist() == mixed.block_table


def test_build_step_lays_out_verify_chunks_sampling_and_prompt_targets():
    cfg = EngineConfig(
        page_size=4,
        max_num_seqs=8,
        max_num_batched_tokens=32,
        max_model_len=32,
        speculative="ngram",
        num_spec_tokens=3,
    )
    bm = BlockManager(32, 4)
    # Two caught-up requests verifying 2 and 0 drafts, and a prompt asking for log-probs.
    two, none = make_request(5, temperature=0.5, top_k=7), make_request(6)
    scored = make_request(4, prompt_logprobs=True)
    for r in (two, none):
        r.output_token_ids = [40]
        bm.allocate(r, r.num_tokens - 1)
        r.num_computed_tokens = r.num_tokens - 1
    two.spec_token_ids = [50, 51]
    scheduled = [(scored, 4), (two, 3), (none, 1)]
    for r, n in scheduled:
        bm.allocate(r, n)
    plan = build_step(cfg, scheduled)
    md, x = plan.inputs.md, plan.inputs
    assert plan.requests == [none, scored, two] and plan.num_draft == [0, 0, 2]
    assert md.cu_q_lens[:5].tolist() == [0, 1, 5, 8, 8]
    assert md.kv_lens[:4].tolist() == [7, 4, 8, 0]
    assert x.positions[:8].tolist() == [6, 0, 1, 2, 3, 5, 6, 7]
    assert x.token_ids[:8].tolist() == [40, 3, 4, 5, 6, 40, 50, 51]
    # A row repeats its last index once its drafts run out.
    assert x.logits_indices[:3].tolist() == [[0, 0, 0, 0], [4, 4, 4, 4], [5, 6, 7, 7]]
    assert x.draft_tokens[2].tolist() == [50, 51, 0] and x.num_draft[:4].tolist() == [0, 0, 2, 0]
    # Prompt position p's target is prompt token p + 1; the last prompt token has none.
    assert x.target_ids[1:5].tolist() == [4, 5, 6, 0] and plan.wants_prompt_logprobs
    assert x.sampling.temperature[:3].tolist() == [0.0, 0.0, 0.5]
    assert x.sampling.top_k[:3].tolist() == [0, 0, 7]
    assert x.sampling.seeds[:3].tolist() == [none.seed, scored.seed, two.seed]
    assert x.sampling.output_index[:3].tolist() == [1, 0, 1]
    assert not bool(x.sampling.all_greedy)
    # Position 7 of the verify chunk is slot 3 of its second page.
    assert md.slot_mapping[7] == two.block_table[1] * 4 + 3
    assert md.page_indices[1, : len(scored.block_table)].tolist() == scored.block_table


def test_precompile_covers_every_step_of_a_workload():
    engine = tiny_engine(tiny_model())
    compiled, seconds = engine.precompile()
    assert compiled == len(bucket_pairs(engine.config)) == 2 and seconds > 0
    compiles = []

    def listener(event, duration, **kwargs):
        if event == BACKEND_COMPILE:
            compiles.append(duration)

    rng = np.random.default_rng(0)
    workload = [
        WorkItem(
            0.002 * i,
            tuple(rng.integers(3, 97, size=int(rng.integers(1, 70))).tolist()),
            SamplingParams(max_tokens=int(rng.integers(1, 20)), temperature=float(i % 3) / 2),
            tenant=f"t{i % 2}",
        )
        for i in range(20)
    ]
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        result = replay(engine, workload, timeout_s=120)
        assert compiles == []
        jax.jit(lambda x: x * 3 + 1)(jnp.arange(7))  # the listener does see a compile
        assert compiles
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert not result.timed_out and len(result.request_ids) == 20
    steps = engine.steps_frame()
    assert set(zip(steps["token_bucket"], steps["seq_bucket"], strict=True)) <= set(
        bucket_pairs(engine.config)
    )
    assert (steps["num_decode_seqs"] > 0).any() and (steps["num_prefill_seqs"] > 0).any()
    assert engine.runner.num_compilations == 2


def test_constructing_a_runner_leaves_the_compilation_cache_config_alone(tmp_path):
    from claimbench.engine.worker.runner import ModelRunner

    keys = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    before = {key: getattr(jax.config, key) for key in keys}
    cfg = EngineConfig(
        dtype="float32",
        max_num_seqs=8,
        max_num_batched_tokens=16,
        max_model_len=64,
        compilation_cache_dir=tmp_path,
    )
    ModelRunner(cfg, tiny_model())
    # Only build_engine (use_compilation_cache) changes JAX's process-wide config.
    assert {key: getattr(jax.config, key) for key in keys} == before
    assert before["jax_compilation_cache_dir"] != str(tmp_path)


@pytest.mark.slow
def test_persistent_compilation_cache_is_written(tmp_path):
    previous = jax.config.jax_persistent_cache_min_compile_time_secs
    previous_dir = jax.config.jax_compilation_cache_dir
    try:
        # A pool size no other test uses, so the step really compiles here.
        engine = tiny_engine(
            tiny_model(), num_pages=37, max_num_batched_tokens=16, compilation_cache_dir=tmp_path
        )
        assert engine.precompile()[0] == 1
        assert any(tmp_path.iterdir())
    finally:
        from jax.experimental.compilation_cache import compilation_cache

        jax.config.update("jax_compilation_cache_dir", previous_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", previous)
        compilation_cache.reset_cache()
