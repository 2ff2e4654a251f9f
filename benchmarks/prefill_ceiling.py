"""The native attention kernels' prefill against the host's compute ceiling, one and two threads.

Prefill attention is bound by arithmetic (each chunk token scores its whole context), so its
ceiling is the host's multiply-add peak (kernels/native_peak.py), not a read rate. The
prefill-heavy step of benchmarks/attention_kernel.py is timed with the native kernels on each
thread count (kernels/native_threads.py), alternating with the peak on as many threads, and its
FLOP/s (``attention_flops`` over the median time a call) is reported as a fraction of the peak.
"""

from __future__ import annotations

import statistics

from claimbench.kernels import native_peak, native_threads

BLOCKS = 3  # kernel and peak blocks, alternating
THREADS = (1, 2)


def attention_flops(q_lens: list[int], kv_lens: list[int], num_q_heads: int, head_dim: int) -> int:
    """FLOPs of causal attention over ragged sequences: query j of a sequence of ``q`` new
    tokens and ``kv`` in all (its own included) scores and sums ``kv - q + j + 1`` keys, two
    multiply-adds per key and head dimension (q.k, then p.v), each two FLOPs."""
    keys = 0
    for q, kv in zip(q_lens, kv_lens, strict=True):
        keys += q * (kv - q) + q * (q + 1) // 2
    return 4 * num_q_heads * head_dim * keys


def prefill_against_peak(time_call, flops: int, iters: int) -> dict:
    """``time_call(iters)`` (median seconds of a call of the prefill-heavy step) on each of
    THREADS thread counts and the multiply-add peak on as many, in BLOCKS alternating blocks:
    {threads: {ms, gflop_s, peak_gflop_s, fraction}}."""
    seconds: dict[int, list[float]] = {t: [] for t in THREADS}
    peaks: dict[int, list[float]] = {t: [] for t in THREADS}
    for _ in range(BLOCKS):
        for t in THREADS:
            with native_threads.threads(t):
                seconds[t].append(time_call(iters))
            peaks[t].append(native_peak.fma_peak(t))
    out = {}
    for t in THREADS:
        s, peak = statistics.median(seconds[t]), statistics.median(peaks[t])
        out[str(t)] = {
            "ms": s * 1e3,
            "gflop_s": flops / s / 1e9,
            "peak_gflop_s": peak / 1e9,
            "fraction": flops / s / peak,
        }
    return out


def prefill_report(result: dict, flops: int) -> list[str]:
    lines = [f"native prefill-heavy attention ({flops / 1e9:.2f} GFLOP a call) against the "
             "multiply-add peak on as many threads:"]  # fmt: skip
    for t, r in result.items():
        lines.append(
            f"  {t} thread{'s' if t != '1' else ' '} {r['ms']:8.3f} ms  {r['gflop_s']:6.1f} "
            f"GFLOP/s = {r['fraction']:.2f} of {r['peak_gflop_s']:.0f} GFLOP/s"
        )
    return lines
