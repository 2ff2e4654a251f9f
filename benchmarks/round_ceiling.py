"""A kernel-ceiling model of one round of benchmarks/engine_vs_vllm.py's workload.

A round's work is counted analytically from the workload and the model, as the engine does it:
the dense matmuls of every prompt token (prefill) and of every decode token (each request's
output_len - 1 tokens after the one its prefill samples), the output head only at the positions
that are sampled (one a prompt at its end, one a decode token), causal attention over each
prompt (QK^T and PV, 2 FLOPs a multiply-add), and the KV that decode attention reads (each
decode token reads its whole context, itself included, in every layer). Each kind of work is
divided by its kernel's ceiling, measured on this host in the same run: the native dense
kernel's FLOP/s on this model's layer matrices at the rows a round's steps carry (prefill at the
step budget, decode at the sequences that decode together) and on its output head at the rows
that are sampled (a prefill step's finished prompts, a decode step's sequences: never the head at
the step budget, which the engine does not run and which, writing a logits matrix larger than the
caches, ran at 0.35-0.45 of the layers' rate on a 2-core Zen 5 host and pulled the prefill
ceiling down to about 0.7 of theirs), one call after another (``serial_dense``), prefill
attention at the layers' best rate (the dense peak, not the prefill kernel's own rate), and
decode attention at the faster of the 1- and 2-thread contiguous read ceilings
(native_bandwidth.read_sum; on a 2-core host the 2-thread one) over buffers the size of one
layer's decode-step KV, enough of them in turn that each read comes from memory. The model's
round is the sum: no host work, no op between the kernels, every kernel at its ceiling; a
measured round is judged against it (target: at most TARGET_VS_MODEL times the model's).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time

TARGET_VS_MODEL = 1.2  # a measured round at most this many times the model's round
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
READ_THREADS = (1, 2)
MAX_READ_BUFFERS = 64  # the rotation stops here (a tiny step's KV fits in cache anyway)
MIN_READ_BYTES = 2**20  # a read buffer is never smaller: the timer needs something to time


@dataclasses.dataclass(frozen=True)
class RoundWork:
    """One round's analytic work, and the rows its steps carry."""

    prefill_dense_flops: float  # every prompt token's projections, the head once a prompt
    decode_dense_flops: float  # every decode token's projections and head
    prefill_head_flops: float  # the head's part of prefill_dense_flops
    decode_head_flops: float  # the head's part of decode_dense_flops
    prefill_attn_flops: float  # causal QK^T and PV over each prompt
    decode_kv_bytes: float  # KV read by decode attention, all layers
    prefill_rows: int  # rows of a step that carries prefill: the step budget
    decode_rows: int  # rows of a decode step: the sequences decoding together
    prefill_head_rows: int  # rows the head runs on in a prefill step: the prompts it finishes
    decode_step_layer_kv_bytes: int  # KV one layer reads in an average decode step
    output_tokens: int


def matmul_shapes(cfg) -> list[tuple[int, int]]:
    """[(K, N)] of every matmul a token runs, layers then the output head (dense MLPs only)."""
    if getattr(cfg, "num_experts", 0):
        raise ValueError("the ceiling model counts dense MLPs only, not a mixture of experts")
    d, f, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    q, kv = cfg.num_heads * hd, cfg.num_kv_heads * hd
    per_layer = [(d, q), (d, kv), (d, kv), (q, d), (d, f), (d, f), (f, d)]
    return per_layer * cfg.num_layers + [(d, cfg.vocab_size)]


def round_work(job, cfg) -> RoundWork:
    """The work of one round of ``job`` (engine_vs_vllm.Job: its prompts' token counts,
    output_len, dtype, step budget, max_num_seqs) on a model of ModelConfig ``cfg``."""
    shapes = matmul_shapes(cfg)
    layer_flops = sum(2 * k * n for k, n in shapes[:-1])
    head_flops = 2 * shapes[-1][0] * shapes[-1][1]
    lens = [len(p) for p in job.prompts]
    decode_each = job.output_len - 1  # the first output token is sampled by the prefill
    decode_tokens = decode_each * len(lens)
    # Each query position i of a prompt attends to i + 1 keys: 2 * head_dim FLOPs for the score
    # and 2 * head_dim for the value, every query head, every layer.
    pairs = sum(n * (n + 1) // 2 for n in lens)
    attn_flops = 4 * cfg.head_dim * cfg.num_heads * cfg.num_layers * pairs
    # Decode token j (1..output_len-1) of a prompt of n tokens sits at position n + j - 1 and
    # reads n + j tokens of K and V.
    token_kv = 2 * cfg.num_kv_heads * cfg.head_dim * DTYPE_BYTES[job.dtype]
    context = sum(decode_each * n + decode_each * (decode_each + 1) // 2 for n in lens)
    kv_bytes = token_kv * cfg.num_layers * context
    decode_rows = min(job.max_num_seqs, len(lens))
    steps = max(1, math.ceil(decode_tokens / decode_rows))
    prefill_steps = max(1, math.ceil(sum(lens) / job.max_num_batched_tokens))
    return RoundWork(
        prefill_dense_flops=float(sum(lens) * layer_flops + len(lens) * head_flops),
        decode_dense_flops=float(decode_tokens * (layer_flops + head_flops)),
        prefill_head_flops=float(len(lens) * head_flops),
        decode_head_flops=float(decode_tokens * head_flops),
        prefill_attn_flops=float(attn_flops),
        decode_kv_bytes=float(kv_bytes),
        prefill_rows=min(job.max_num_batched_tokens, sum(lens)),
        decode_rows=decode_rows,
        prefill_head_rows=max(1, math.ceil(len(lens) / prefill_steps)),
        decode_step_layer_kv_bytes=round(kv_bytes / cfg.num_layers / steps),
        output_tokens=len(lens) * job.output_len,
    )


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """This host's kernel ceilings, measured: FLOP/s of the native dense kernel by rows over the
    layers' matrices (``dense_flop_s``) and over the output head (``head_flop_s``), and
    contiguous read bytes/s by threads over buffers of ``read_bytes``."""

    dense_flop_s: dict[int, float]
    head_flop_s: dict[int, float]
    read_bytes_s: dict[int, float]
    read_bytes: int = 0

    def to_json(self) -> dict:
        return {
            "dense_gflop_s": {str(r): v / 1e9 for r, v in self.dense_flop_s.items()},
            "head_gflop_s": {str(r): v / 1e9 for r, v in self.head_flop_s.items()},
            "read_gb_per_s": {str(t): v / 1e9 for t, v in self.read_bytes_s.items()},
            "read_bytes": self.read_bytes,
        }


def rate_at(rates: dict[int, float], rows: int) -> float:
    """The rate measured at the row count nearest ``rows``."""
    return rates[min(rates, key=lambda r: (abs(r - rows), -r))]


def model_round(work: RoundWork, ceilings: Ceilings) -> dict:
    """Seconds of one round with every kernel at its ceiling, by kernel class, their sum
    (``total_s``) and the output tokens/s that gives."""
    layers, head = ceilings.dense_flop_s, ceilings.head_flop_s
    dense_prefill = (work.prefill_dense_flops - work.prefill_head_flops) / rate_at(
        layers, work.prefill_rows
    ) + work.prefill_head_flops / rate_at(head, work.prefill_head_rows)
    dense_decode = (work.decode_dense_flops - work.decode_head_flops) / rate_at(
        layers, work.decode_rows
    ) + work.decode_head_flops / rate_at(head, work.decode_rows)
    prefill_attn = work.prefill_attn_flops / max(ceilings.dense_flop_s.values())
    decode_attn = work.decode_kv_bytes / max(ceilings.read_bytes_s.values())
    total = dense_prefill + dense_decode + prefill_attn + decode_attn
    return {
        "dense_prefill_s": dense_prefill,
        "dense_decode_s": dense_decode,
        "dense_s": dense_prefill + dense_decode,
        "prefill_attn_s": prefill_attn,
        "decode_attn_s": decode_attn,
        "total_s": total,
        "tok_s": work.output_tokens / total,
    }


def model_line(model: dict, measured_s: float | None = None) -> str:
    """The model in one line, and where given a measured median round, how far from it."""
    line = (
        f"kernel-ceiling model: {model['total_s']:.2f} s a round (dense {model['dense_s']:.2f}, "
        f"prefill attn {model['prefill_attn_s']:.2f}, decode attn {model['decode_attn_s']:.2f})"
        f" = {model['tok_s']:,.0f} tok/s"
    )
    if measured_s is not None:
        line += (
            f"; ours median {measured_s:.2f} s = {measured_s / model['total_s']:.2f}x the model "
            f"(target <= {TARGET_VS_MODEL}x)"
        )
    return line


def serial_dense(shapes):
    """A jitted fn(xs, ps) that runs the native dense kernel on each of ``shapes`` ([(K, N)]),
    one call at a time: ``xs`` {K: f32[rows, K]}, ``ps`` the packed weights in the order of
    ``shapes``; it returns a scalar that depends on every call. The calls run in a loop over a
    switch, so none can start before the last has ended. Jitted side by side, XLA ran
    independent calls at once on its own threads (an optimization barrier between them was
    dropped by the compiler), so "one thread" computed on two: 1.6x the one-thread peak."""
    import functools

    import jax
    import jax.numpy as jnp

    from claimbench.kernels import native_dense

    def call(xs, ps, i, k, n):
        return native_dense.dense(xs[k], ps[i], n)[-1, -1]

    @jax.jit
    def run(xs, ps):
        branches = [functools.partial(call, xs, ps, i, k, n) for i, (k, n) in enumerate(shapes)]
        return jax.lax.fori_loop(
            0, len(shapes), lambda i, acc: acc + jax.lax.switch(i, branches), jnp.float32(0)
        )

    return run


class SerialDense:
    """The native dense kernel over the matrices ``shapes`` ([(K, N)]) at ``rows`` rows of
    random f32, one call after another (``serial_dense``), compiled and run once: ``flops`` a
    pass, ``median_s`` times passes."""

    def __init__(self, shapes, rows: int) -> None:
        import jax
        import jax.numpy as jnp
        import numpy as np

        from claimbench.kernels import native_dense

        rng = np.random.default_rng(0)
        self.packed = [
            native_dense.pack(jnp.asarray(rng.standard_normal(s, np.float32) * 0.05))
            for s in shapes
        ]
        self.inputs = {
            k: jnp.asarray(rng.standard_normal((rows, k), np.float32)) for k, _ in shapes
        }
        self.flops = sum(2 * rows * k * n for k, n in shapes)
        self.run = serial_dense(shapes)
        jax.block_until_ready(self.run(self.inputs, self.packed))

    def median_s(self, iters: int, before=None) -> float:
        """The median seconds of ``iters`` passes; ``before`` (a callable), where given, runs
        untimed before each pass (dense_matmul.py's eviction of the caches)."""
        import jax

        samples = []
        for _ in range(iters):
            if before is not None:
                before()
            start = time.perf_counter()
            jax.block_until_ready(self.run(self.inputs, self.packed))
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)


def dense_flop_s(shapes, rows: int, repeats: int = 3, iters: int = 5) -> float:
    """FLOP/s of the native dense kernel over the matrices ``shapes`` ([(K, N)]) at ``rows``
    rows of f32, one call after another (``SerialDense``): the best of ``repeats`` medians of
    ``iters`` passes."""
    timer = SerialDense(shapes, rows)
    return timer.flops / min(timer.median_s(iters) for _ in range(repeats))


def read_bytes_s(nbytes: int, threads: tuple[int, ...] = READ_THREADS, iters: int = 3) -> dict:
    """{threads: bytes/s} of a contiguous read (native_bandwidth.read_sum) of buffers of
    ``nbytes``, each thread count its own buffers, enough in turn that the others' bytes read
    between two uses of one are at least twice the L3 (so each read comes from memory): the
    median over ``iters`` passes of the rotation after one untimed pass."""
    import numpy as np

    from claimbench.kernels import native_bandwidth

    l3 = native_bandwidth.last_level_cache_bytes()
    count = min(MAX_READ_BUFFERS, 1 + max(1, math.ceil(2 * l3 / nbytes)))
    rng = np.random.default_rng(0)
    rates = {}
    for t in threads:
        # Random values: pages of zeros may all map the one zero page, which stays in cache.
        buffers = [rng.random(nbytes // 4, np.float32) for _ in range(count)]
        seconds = []
        for i in range(count * (iters + 1)):
            elapsed = native_bandwidth.read_sum(buffers[i % count], t)[1]
            if i >= count:
                seconds.append(elapsed)
        rates[t] = nbytes // 4 * 4 / statistics.median(seconds)
        del buffers
    return rates


def measure_ceilings(cfg, work: RoundWork, threads: tuple[int, ...] = READ_THREADS) -> Ceilings:
    """This host's ceilings for ``work`` on a model of ``cfg``: the dense kernel on the layers'
    matrices at the rows the round's steps carry and on the head at the rows it samples, the
    contiguous reads over one layer's decode-step KV.
    NativeUnavailable where the native kernels cannot run here."""
    from claimbench.kernels import native_bandwidth, native_dense
    from claimbench.kernels.native.build import NativeUnavailable

    for kernel in (native_dense, native_bandwidth):
        if (reason := kernel.unavailable_reason()) is not None:
            raise NativeUnavailable(reason)
    *layers, head = matmul_shapes(cfg)
    nbytes = max(MIN_READ_BYTES, work.decode_step_layer_kv_bytes)
    return Ceilings(
        dense_flop_s={
            r: dense_flop_s(layers, r) for r in sorted({work.decode_rows, work.prefill_rows})
        },
        head_flop_s={
            r: dense_flop_s([head], r) for r in sorted({work.decode_rows, work.prefill_head_rows})
        },
        read_bytes_s=read_bytes_s(nbytes, threads),
        read_bytes=nbytes // 4 * 4,
    )
