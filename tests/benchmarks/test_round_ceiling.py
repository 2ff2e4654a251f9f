"""benchmarks/round_ceiling.py and benchmarks/idle_cores.py: a round's analytic work against a
count made token by token here, the model's sum, the ceilings measured at a tiny size, and the
idle core share of a busy thread and of a sleep."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from claimbench.models.config import ModelConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import idle_cores  # noqa: E402
import round_ceiling as rc  # noqa: E402

# 2 layers of hidden 8, MLP 12, 2 query heads and 1 KV head of 4, vocabulary 10.
TINY = ModelConfig(
    vocab_size=10,
    hidden_size=8,
    intermediate_size=12,
    num_layers=2,
    num_heads=2,
    num_kv_heads=1,
    head_dim=4,
)


def tiny_job(**overrides) -> SimpleNamespace:
    """Two prompts of 3 and 5 tokens, 4 output tokens each, f32."""
    job = dict(
        prompts=[[0, 1, 2], [0, 1, 2, 3, 4]],
        output_len=4,
        dtype="float32",
        max_num_seqs=8,
        max_num_batched_tokens=6,
    )
    return SimpleNamespace(**{**job, **overrides})


def hand_count(job, cfg) -> dict:
    """The round's work walked token by token: each prompt token through every projection,
    the head at the prompt's end, then each decode token through the projections and the head
    while reading every K and V row of its context."""
    d, f, h, kv, hd = (
        cfg.hidden_size,
        cfg.intermediate_size,
        cfg.num_heads,
        cfg.num_kv_heads,
        cfg.head_dim,
    )
    # Multiply-adds of one token through one layer: q, k, v, o, then gate, up and down.
    token_layer_macs = d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * f
    head_macs = d * cfg.vocab_size
    kv_row_bytes = 2 * kv * hd * 4  # K and V of one token in one layer, f32
    count = dict(prefill=0, decode=0, attn=0, kv=0)
    for prompt in job.prompts:
        for position in range(len(prompt)):
            count["prefill"] += 2 * cfg.num_layers * token_layer_macs
            # This query against keys 0..position: a dot of head_dim for the score and a
            # weighted sum of head_dim for the value, each head, each layer.
            count["attn"] += cfg.num_layers * h * (position + 1) * 2 * (2 * hd)
        count["prefill"] += 2 * head_macs  # the first output token is sampled here
        for j in range(1, job.output_len):
            count["decode"] += 2 * (cfg.num_layers * token_layer_macs + head_macs)
            context = len(prompt) + j  # the prompt, the outputs before, this token
            count["kv"] += cfg.num_layers * context * kv_row_bytes
    return count


def test_round_work_is_the_token_by_token_count():
    job = tiny_job()
    work = rc.round_work(job, TINY)
    count = hand_count(job, TINY)
    assert work.prefill_dense_flops == count["prefill"]
    assert work.decode_dense_flops == count["decode"]
    assert work.prefill_attn_flops == count["attn"]
    assert work.decode_kv_bytes == count["kv"]
    # The same by hand: 480 multiply-adds a token a layer, 80 in the head; 8 prompt tokens,
    # 6 decode tokens; 6 + 15 query-key pairs; 15 + 21 tokens of context read, 64 bytes each.
    assert (work.prefill_dense_flops, work.decode_dense_flops) == (15_680, 12_480)
    assert (work.prefill_attn_flops, work.decode_kv_bytes) == (1_344, 2_304)
    # The head's parts: 2 prompts' last tokens and 6 decode tokens, 160 FLOPs each.
    assert (work.prefill_head_flops, work.decode_head_flops) == (320, 960)
    assert work.output_tokens == 8
    assert (work.prefill_rows, work.decode_rows) == (6, 2)  # the budget; both prompts decode
    # 8 prompt tokens in steps of 6: 2 prefill steps, each sampling one prompt's end.
    assert work.prefill_head_rows == 1
    assert work.decode_step_layer_kv_bytes == 2_304 // 2 // 3  # 3 decode steps of 2 rows


def test_round_work_follows_the_workload():
    one_token = rc.round_work(tiny_job(output_len=1), TINY)
    assert one_token.decode_dense_flops == 0 and one_token.decode_kv_bytes == 0
    bf16 = rc.round_work(tiny_job(dtype="bfloat16"), TINY)
    assert bf16.decode_kv_bytes == rc.round_work(tiny_job(), TINY).decode_kv_bytes / 2
    assert rc.round_work(tiny_job(max_num_seqs=1), TINY).decode_rows == 1
    # One step takes both prompts: its head runs on both of their ends.
    assert rc.round_work(tiny_job(max_num_batched_tokens=8), TINY).prefill_head_rows == 2
    with pytest.raises(ValueError, match="dense MLPs only"):
        rc.matmul_shapes(SimpleNamespace(num_experts=8))


def test_the_model_adds_each_kernel_class_at_its_ceiling():
    work = rc.RoundWork(
        prefill_dense_flops=300e9,
        decode_dense_flops=60e9,
        prefill_head_flops=10e9,
        decode_head_flops=15e9,
        prefill_attn_flops=20e9,
        decode_kv_bytes=12e9,
        prefill_rows=2048,
        decode_rows=64,
        prefill_head_rows=8,
        decode_step_layer_kv_bytes=25_000_000,
        output_tokens=8192,
    )
    ceilings = rc.Ceilings(
        dense_flop_s={64: 150e9, 2048: 290e9},
        head_flop_s={8: 50e9, 64: 100e9, 2048: 1e9},
        read_bytes_s={1: 20e9, 2: 30e9},
    )
    m = rc.model_round(work, ceilings)
    # The layers at 2,048 rows (1.0 s), the head at the 8 rows it samples (0.2 s): never at
    # 2,048, where it would take 10 s.
    assert m["dense_prefill_s"] == pytest.approx(1.2)
    assert m["dense_decode_s"] == pytest.approx(0.45)  # layers 0.3 s and head 0.15 s, 64 rows
    assert m["dense_s"] == pytest.approx(1.65)
    assert m["prefill_attn_s"] == pytest.approx(20 / 290)  # at the layers' best rate
    assert m["decode_attn_s"] == pytest.approx(0.4)  # at the faster read
    assert m["total_s"] == pytest.approx(1.65 + 20 / 290 + 0.4)
    assert m["tok_s"] == pytest.approx(8192 / m["total_s"])
    # Rows that were not measured take the nearest measured count.
    assert rc.rate_at(ceilings.dense_flop_s, 100) == 150e9
    assert rc.rate_at(ceilings.dense_flop_s, 1500) == 290e9
    line = rc.model_line(m, 2.6)
    assert line.startswith("kernel-ceiling model: 2.12 s a round (dense 1.65, prefill attn")
    assert "= 3,866 tok/s; ours median 2.60 s = 1.23x the model (target <= 1.2x)" in line
    assert ceilings.to_json()["read_gb_per_s"] == {"1": 20.0, "2": 30.0}
    assert ceilings.to_json()["head_gflop_s"] == {"8": 50.0, "64": 100.0, "2048": 1.0}


@pytest.mark.slow
def test_ceilings_are_measured_at_the_rounds_rows():
    from claimbench.kernels import native_bandwidth, native_dense

    if native_dense.unavailable_reason() or native_bandwidth.unavailable_reason():
        pytest.skip("the native kernels cannot build here")
    work = rc.round_work(tiny_job(), TINY)
    ceilings = rc.measure_ceilings(TINY, work)
    assert sorted(ceilings.dense_flop_s) == [2, 6]  # decode rows, the step budget
    assert sorted(ceilings.head_flop_s) == [1, 2]  # a prefill step's samples, decode rows
    assert sorted(ceilings.read_bytes_s) == [1, 2]
    assert ceilings.read_bytes == rc.MIN_READ_BYTES  # the tiny step's KV is smaller
    assert all(v > 0 for v in [*ceilings.dense_flop_s.values(), *ceilings.read_bytes_s.values()])
    assert rc.model_round(work, ceilings)["total_s"] > 0


def test_serial_dense_runs_every_call_one_at_a_time():
    import jax.numpy as jnp
    import numpy as np

    from claimbench.kernels import native_dense

    if native_dense.unavailable_reason():
        pytest.skip("the native kernels cannot build here")
    shapes = [(8, 12), (12, 8), (8, 12)]
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    xs = {k: jnp.asarray(rng.standard_normal((5, k)).astype(np.float32)) for k in (8, 12)}
    ps = [native_dense.pack(jnp.asarray(w)) for w in weights]
    run = rc.serial_dense(shapes)
    # Every product's last element, summed: each call ran on its own input and weights.
    expected = sum((np.asarray(xs[w.shape[0]]) @ w)[-1, -1] for w in weights)
    assert float(run(xs, ps)) == pytest.approx(float(expected), rel=1e-5)
    # In the compiled program the calls sit in the branches of one switch inside a loop: XLA
    # has no two of them to run at once.
    hlo = run.lower(xs, ps).compile().as_text()
    assert "while" in hlo and "conditional" in hlo
    entry = hlo[hlo.index("ENTRY") :]
    assert "custom-call" not in entry.split("\n\n")[0]


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_one_busy_thread_leaves_half_of_two_cores_idle():
    with idle_cores.IdleMeter(cores=2) as meter:
        start = time.thread_time()
        spin(0.5)
        busy = time.thread_time() - start
    assert meter.wall_s >= 0.5
    # On a quiet host the thread has its core all along: 0.5. Where other work on the host
    # takes part of that core, idle reads higher by what the thread lost.
    share = busy / meter.wall_s
    assert meter.idle_core_frac == pytest.approx(1 - share / 2, abs=0.05)
    assert meter.idle_core_frac >= 0.45
    if share > 0.9:
        assert meter.idle_core_frac == pytest.approx(0.5, abs=0.1)


def test_stretches_shorter_than_a_clock_tick_are_measured():
    # A round of a tiny job lasts a few milliseconds. Read from a clock that counts in ticks
    # (10 ms) such a stretch had 0 or 10 ms of CPU, an idle share of 1 or below 0, and tick by
    # tick the process's CPU time outran the wall time it was measured over.
    for _ in range(40):
        with idle_cores.IdleMeter(cores=2) as meter:
            start = time.thread_time()
            spin(0.002)
            busy = time.thread_time() - start
        assert 0 <= meter.idle_core_frac <= 1
        assert meter.idle_core_frac == pytest.approx(1 - busy / meter.wall_s / 2, abs=0.1)


def test_a_sleep_leaves_the_cores_idle():
    with idle_cores.IdleMeter(cores=2) as meter:
        time.sleep(0.4)
    assert meter.idle_core_frac == pytest.approx(1.0, abs=0.05)
    assert idle_cores.idle_core_frac(cpu_s=1.0, wall_s=1.0, cores=4) == pytest.approx(0.75)
    with pytest.raises(ValueError):
        idle_cores.idle_core_frac(1.0, 0.0, 2)
    assert idle_cores.IdleMeter().cores == idle_cores.usable_cores() >= 1


def test_the_kernels_spin_without_work_counts_as_idle(monkeypatch):
    # A thread that spins for the native kernels' next call burns CPU that computes nothing:
    # the meter takes what the kernels report as waiting off the CPU seconds.
    waited = iter([10.0, 10.3])
    monkeypatch.setattr(idle_cores, "kernel_waiting_seconds", lambda: next(waited))
    with idle_cores.IdleMeter(cores=2) as meter:
        spin(0.4)
    assert meter.waiting_s == pytest.approx(0.3)
    assert meter.cpu_s < 0.4 - 0.3 + 0.05  # the spin's CPU seconds (at most 0.4) less 0.3
