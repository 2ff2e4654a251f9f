"""The native decode kernel against what the memory gives it: attention_kernel.py's read ceilings.

The kernel is timed alone, as the engine's layers call it inside one compiled step: a compiled
pass calls it on each layer's pool in turn, each call's queries depending on the last call's
output so the calls run in order, with nothing else of the layer (the KV write, the prefill
path) and no Python dispatch between them. Timed per call through the whole layer from Python
instead, as the script's table does, the fixed cost of each call is counted as reading time:
on a 2-core Zen 4 host at the engine's shape (four pools), the kernel alone took 1.06-1.13 ms a
call (26-28 GB/s of KV) where the whole layer call took 1.09-1.24 ms in the same runs.

Beside the kernel: the read ceilings (kernels/native_bandwidth.py) on one and two threads over
the same bytes, a contiguous sum and the step's own pages in the kernel's order, and the
kernel's own rate with its KV in the caches (in_cache_seqs).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from claimbench.kernels import native_attention, native_bandwidth, native_threads

BLOCKS = 3  # kernel and read blocks, alternating (decode_against_ceiling)
CEILING_THREADS = (1, 2)


def step_pages(step: list) -> np.ndarray:
    """The pages a decode step reads, in the order the kernel reads them: sequence by
    sequence, each sequence's pages in its page-table order."""
    md = step[4]
    page_size = step[3].pages.shape[1]
    table, lens = np.asarray(md.page_indices), np.asarray(md.kv_lens)
    rows = [table[s, : -(-int(n) // page_size)] for s, n in enumerate(lens)]
    return np.concatenate(rows).astype(np.int32)


def kernel_pass(step: list, caches: list, sm_scale: float):
    """A compiled pass of the native decode kernel alone over ``caches`` in turn, for a
    decode-only ``step`` (q, k, v, cache, metadata): () -> the calls' summed output."""
    q, k, _, _, md = step
    n, num_q_heads, head_dim = q.shape
    qg = q.reshape(n, k.shape[1], num_q_heads // k.shape[1], head_dim)

    @jax.jit
    def run(qg, caches, md):
        acc = jnp.zeros(qg.shape, jnp.float32)
        for cache in caches:
            # Each call's queries depend on the last output: the calls run one after another.
            acc = acc + native_attention.paged_decode_attention(
                qg + 1e-9 * acc, cache, md, jnp.float32, sm_scale, None, None
            )
        return acc

    return lambda: run(qg, caches, md)


def seconds_a_call(run, calls: int) -> float:
    """Seconds of one pass of ``run`` to its result, over the ``calls`` kernel calls in it."""
    start = time.perf_counter()
    jax.block_until_ready(run())
    return (time.perf_counter() - start) / calls


def decode_against_ceiling(layers: list[list], kv_bytes: int, iters: int, sm_scale: float):
    """The decode kernel alone timed with the read ceilings beside it, in BLOCKS alternating
    blocks: for each of CEILING_THREADS, ``iters`` passes over the layers' pools (the engine's
    layers, back to back) with the kernels on that many threads (native_threads), then
    ``iters`` reads for each layer: sums of that thread count's buffers in turn (each
    ``kv_bytes`` of random f32) and reads of that thread count's pools (random f32 pages of the
    KV pool's size) at the step's pages in the kernel's order. ({threads: median seconds of a
    kernel call}, {threads: median contiguous read bytes/s}, {threads: median paged read
    bytes/s}).

    Not call by call: with the reads run between its calls the kernel read 14.8-15.6 GB/s of
    KV, back to back 21.5-24.6 (the engine's shape on a 2-core Zen 4 virtual machine, the two
    ways alternating by run, two runs each). Each thread count has its own buffers and pools:
    read right after another read of the same memory, a buffer smaller than the L3 would come
    partly from it."""
    rng = np.random.default_rng(0)
    # Random values: pages of zeros may all map the one zero page, which stays in cache.
    buffers = {
        t: [rng.random(max(1, kv_bytes // 4), np.float32) for _ in layers] for t in CEILING_THREADS
    }
    pool_pages = layers[0][3].pages
    page_floats = pool_pages[0].nbytes // 4
    pools = {
        t: [rng.random((pool_pages.shape[0], page_floats), np.float32) for _ in layers]
        for t in CEILING_THREADS
    }
    pages = [step_pages(step) for step in layers]
    paged_bytes = pages[0].size * page_floats * 4
    run = kernel_pass(layers[0], [step[3] for step in layers], sm_scale)
    times = {t: [] for t in CEILING_THREADS}
    rates = {t: [] for t in CEILING_THREADS}
    paged_rates = {t: [] for t in CEILING_THREADS}

    def block(passes: int, record: bool) -> None:
        for threads in CEILING_THREADS:
            with native_threads.threads(threads):
                for _ in range(passes):
                    seconds = seconds_a_call(run, len(layers))
                    if record:
                        times[threads].append(seconds)
            for i in range(passes * len(layers)):
                buffer = buffers[threads][i % len(layers)]
                pool = pools[threads][i % len(layers)]
                contiguous = native_bandwidth.read_sum(buffer, threads)[1]
                paged = native_bandwidth.read_pages(pool, pages[i % len(layers)], threads)[1]
                if record:
                    rates[threads].append(buffer.nbytes / contiguous)
                    paged_rates[threads].append(paged_bytes / paged)

    block(1, record=False)  # warm-up: compiles, faults the pages in
    passes = max(1, iters // len(layers))
    for _ in range(BLOCKS):
        block(passes, record=True)
    median = lambda r: {t: float(np.median(v)) for t, v in r.items()}  # noqa: E731
    return median(times), median(rates), median(paged_rates)


def in_cache_seqs(kv_lens: list[int], row_bytes: int, l3_bytes: int) -> int:
    """How many of the decode sequences, from the first, have their KV fit half the L3
    together (at least one)."""
    total, count = 0, 0
    for n in kv_lens:
        total += n * row_bytes
        if total > l3_bytes // 2:
            break
        count += 1
    return max(1, count)


def decode_in_cache(step: list, kv_bytes: int, calls: int, iters: int, sm_scale: float):
    """The decode kernel alone over a decode-only ``step`` whose KV (``kv_bytes``) fits the
    caches, ``calls`` calls a pass on its one pool, ``iters`` passes after a warm-up:
    {seqs, bytes, kv_gb_per_s}."""
    run = kernel_pass(step, [step[3]] * calls, sm_scale)
    seconds_a_call(run, calls)
    seconds = float(np.median([seconds_a_call(run, calls) for _ in range(iters)]))
    return {"seqs": step[0].shape[0], "bytes": kv_bytes, "kv_gb_per_s": kv_bytes / seconds / 1e9}


def ceiling_result(
    kv_bytes: int, seconds: dict[int, float], rates: dict[int, float], paged: dict[int, float]
) -> dict:
    """Each read ceiling's GB/s on each thread count (contiguous: ``gb_per_s``; the step's
    pages in the kernel's order: ``paged_gb_per_s``), the decode kernel's median seconds a call
    alone on each thread count and its KV GB/s (the step's KV bytes over that), and that as a
    fraction of the read on as many threads (``fraction``, ``paged_fraction``). The kernel's
    unsuffixed figures are those on the most threads, as the engine runs it."""
    kv = {t: kv_bytes / s for t, s in seconds.items()}
    most = max(seconds)
    return {
        "bytes": kv_bytes,
        "gb_per_s": {str(t): r / 1e9 for t, r in rates.items()},
        "paged_gb_per_s": {str(t): r / 1e9 for t, r in paged.items()},
        "native_decode_kernel_ms": seconds[most] * 1e3,
        "native_decode_kv_gb_per_s": kv[most] / 1e9,
        "kernel_ms": {str(t): s * 1e3 for t, s in seconds.items()},
        "kernel_kv_gb_per_s": {str(t): v / 1e9 for t, v in kv.items()},
        "fraction": {str(t): kv[t] / r for t, r in rates.items()},
        "paged_fraction": {str(t): kv[t] / r for t, r in paged.items()},
    }


def ceiling_report(ceiling: dict) -> str:
    """The read ceilings, the native decode kernel's KV rate as a fraction of each, and its
    rate with the KV in the caches."""
    if "unavailable" in ceiling:
        return f"read ceiling: not measured ({ceiling['unavailable']})"
    kv = ceiling["native_decode_kv_gb_per_s"]
    lines = [
        f"the native decode kernel alone (compiled passes over the pools, no KV write): "
        f"{ceiling['native_decode_kernel_ms']:.3f} ms a call, {kv:.1f} GB/s of KV",
        f"read ceilings over the decode-only KV bytes ({ceiling['bytes'] / 1e6:.1f} MB a call), "
        "timed in blocks alternating with the kernel's; the kernel on as many threads:",
    ]
    for name, rates, fractions in (
        ("contiguous", ceiling["gb_per_s"], ceiling["fraction"]),
        ("paged", ceiling["paged_gb_per_s"], ceiling["paged_fraction"]),
    ):
        for threads, rate in rates.items():
            on = ceiling["kernel_kv_gb_per_s"][threads]
            lines.append(
                f"  {name:<10} {threads} thread{'s' if threads != '1' else ' '} {rate:8.1f} GB/s"
                f"   native decode {on:.1f} GB/s of KV = {fractions[threads]:.2f} of it"
            )
    lines.append(
        "  (paged: the step's pages in the kernel's order, each front to back, the next one "
        "prefetched)"
    )
    cached = ceiling["in_cache"]
    lines.append(
        f"the kernel with its KV in the caches ({cached['seqs']} of the sequences, "
        f"{cached['bytes'] / 1e6:.1f} MB, one pool): {cached['kv_gb_per_s']:.1f} GB/s of KV; "
        f"out of cache {kv / cached['kv_gb_per_s']:.2f} of it"
    )
    return "\n".join(lines)
