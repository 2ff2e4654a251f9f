"""Our attention kernels side by side: Pallas (TPU), JAX's shipped kernel, native CPU, XLA.

    python benchmarks/attention_kernel.py [--kv-dtype bf16|f32|int8|fp8] [--iters 20] [--json]

Three synthetic engine steps, each one attention layer call: decode-heavy (--decode-seqs
sequences decoding one token over --context-len tokens of context, plus one prefill
chunk), decode-only (the same decodes without the chunk: the engine's decode step) and
prefill-heavy (--prefill-seqs chunks of --chunk-len tokens, plus a few decodes). For each
implementation: the median wall time over --iters calls (compilation and warm-up
excluded) and the achieved HBM bandwidth, i.e. the bytes the step must move at least
(every KV row read once, q and out once, the new KV rows written once) over that time, as
a percentage of the chip's spec bandwidth (claimbench.hardware.chips).

As in the engine, where each layer reads its own KV pool, the calls go to --layers pools
in turn (the same sequences and page tables, each pool its own memory), so that a call's
KV has been pushed out of the caches by the other pools' since its last use; the default
is enough pools that the others' KV read between two uses of one is at least twice the L3.

On CPU the native decode kernel is also timed alone, as the engine's layers call it inside
one compiled step (compiled passes over the --layers pools, no KV write, no Python dispatch
between calls), and set against two read ceilings (kernels/native_bandwidth.py), each on one
and on two threads over buffers in the same rotation: a STREAM-like sum of floats over the
same number of bytes as the decode-only step's KV (contiguous), and a read of the step's own
pages in the kernel's order, each front to back with the next prefetched (paged: what the
memory gives the kernel's access pattern). The kernel's passes, on one and on two threads
(kernels/native_threads.py), and the reads run in alternating blocks, so all see the same load
on the host. Reported: the read GB/s of each (medians), the kernel's KV bytes/s on each thread
count (the KV bytes over its median time a call), that as a fraction of each read on as many
threads, and the kernel's own rate with its KV in the caches (the first decode
sequences whose KV fits half the L3, one pool): memory cannot make the kernel faster than
that, so where it is below a read ceiling the loop's arithmetic, not the memory, stands
between the kernel and that ceiling (benchmarks/decode_ceiling.py). The native prefill-heavy
step, bound by arithmetic, is set against the host's multiply-add peak on one and two threads
instead (benchmarks/prefill_ceiling.py).

JAX's shipped kernel (jax.experimental.pallas.ops.tpu.ragged_paged_attention) attends
only: it does not write the new KV, takes the same interleaved page layout, and has no
per-token int8 scales (it is skipped for int8 KV). Off TPU the Pallas kernels cannot be
timed (interpret mode simulates the chip in Python); on CPU the XLA path is timed beside
the native kernels (the "cpu" backend, kernels/native_attention.py), and the "% spec"
column is empty (no bandwidth spec for a CPU). The engine's shape on this project's CPU:

    python benchmarks/attention_kernel.py --kv-dtype f32 --num-q-heads 4 --num-kv-heads 2 \
        --head-dim 64 --decode-seqs 64 --context-len 600 --chunk-len 512
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from decode_ceiling import (
    ceiling_report,
    ceiling_result,
    decode_against_ceiling,
    decode_in_cache,
    in_cache_seqs,
)
from prefill_ceiling import attention_flops, prefill_against_peak, prefill_report

from claimbench.hardware.host import host_description, host_line
from claimbench.kernels import native_attention, native_bandwidth, xla_rpa
from claimbench.kernels.kv_quant import (
    FP8_DTYPE,
    LayerKV,
    container_dtype,
    quantize_int8_pages,
    to_container,
)
from claimbench.kernels.metadata import AttentionMetadata
from claimbench.kernels.pallas_rpa import ragged_paged_attention
from claimbench.platform.jax_platforms import set_default_jax_platforms

KV_DTYPES = {"bf16": jnp.bfloat16, "f32": jnp.float32, "int8": jnp.int8, "fp8": FP8_DTYPE}
MAX_LAYERS = 64  # the automatic --layers stops here (a tiny step's KV fits in cache anyway)


def build_step(args, q_lens: list[int], kv_lens: list[int], seed: int):
    """q, k, v, cache and metadata for sequences given in group order (decodes first)."""
    rng = np.random.default_rng(seed)
    page_size, num_seqs = args.page_size, len(q_lens)
    pages_per_seq = -(-max(kv_lens) // page_size)
    num_pages = 1 + num_seqs * pages_per_seq
    # Page 0 is the null page: real sequences get pages 1.., in random order (a pool after
    # much allocation and release) or, with --page-order adjacent, each sequence's in a run.
    order = np.arange(num_pages - 1)
    if args.page_order == "random":
        order = rng.permutation(num_pages - 1)
    page_indices = 1 + order.reshape(num_seqs, pages_per_seq)
    cu_q_lens = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    num_tokens = int(cu_q_lens[-1])
    slot_mapping = np.empty(num_tokens, np.int32)
    for i, (q_len, kv_len) in enumerate(zip(q_lens, kv_lens, strict=True)):
        positions = np.arange(kv_len - q_len, kv_len)
        slots = page_indices[i, positions // page_size] * page_size + positions % page_size
        slot_mapping[cu_q_lens[i] : cu_q_lens[i + 1]] = slots
    num_decode = sum(1 for q_len in q_lens if q_len == 1)
    num_prefill = num_decode + sum(1 for q, kv in zip(q_lens, kv_lens, strict=True) if 1 < q == kv)
    md = AttentionMetadata(
        slot_mapping=jnp.asarray(slot_mapping),
        cu_q_lens=jnp.asarray(cu_q_lens),
        kv_lens=jnp.asarray(kv_lens, jnp.int32),
        page_indices=jnp.asarray(page_indices, jnp.int32),
        num_seqs=jnp.asarray([num_seqs], jnp.int32),
        distribution=jnp.asarray([num_decode, num_prefill, num_seqs], jnp.int32),
    )
    key_q, key_k, key_v, key_c = jax.random.split(jax.random.PRNGKey(seed), 4)
    hq, hkv, d = args.num_q_heads, args.num_kv_heads, args.head_dim
    dtype = jnp.float32 if args.kv_dtype == "f32" else jnp.bfloat16
    q = jax.random.normal(key_q, (num_tokens, hq, d), dtype)
    k = jax.random.normal(key_k, (num_tokens, hkv, d), dtype)
    v = jax.random.normal(key_v, (num_tokens, hkv, d), dtype)
    return q, k, v, layer_cache(args, num_pages, key_c), md


def layer_cache(args, num_pages: int, key: jax.Array) -> LayerKV:
    """One layer's KV pool [num_pages, page_size, 2 * num_kv_heads, head_dim], random."""
    hkv, d = args.num_kv_heads, args.head_dim
    dtype = jnp.float32 if args.kv_dtype == "f32" else jnp.bfloat16
    old = jax.random.normal(key, (num_pages, args.page_size, 2 * hkv, d), dtype)
    if args.kv_dtype == "int8":
        cache = LayerKV(*quantize_int8_pages(old))
    elif args.kv_dtype == "fp8":
        cache = LayerKV(old.astype(FP8_DTYPE), jnp.ones(2, jnp.float32))
    else:
        cache = LayerKV(old, None)
    if jax.default_backend() != "tpu":
        # Off TPU, as in the engine: bf16/fp8 pages as integer bit containers, which XLA
        # writes in place (kv_quant.BIT_CONTAINERS).
        cache = LayerKV(to_container(cache.pages, container_dtype(cache.pages.dtype)), cache.scales)
    return cache


def build_layers(args, q_lens: list[int], kv_lens: list[int], seed: int) -> list[list]:
    """``build_step``'s step for each of --layers pools: one q, k, v and metadata, as the
    engine's layers share them, and each layer its own KV pool."""
    q, k, v, cache, md = build_step(args, q_lens, kv_lens, seed)
    keys = jax.random.split(jax.random.PRNGKey(1000 + seed), args.layers)
    caches = [cache] + [layer_cache(args, cache.pages.shape[0], key) for key in keys[1:]]
    return [[q, k, v, c, md] for c in caches]


def kv_row_bytes(args) -> int:
    """Bytes of one token's KV row (K and V of every KV head, and int8's row scales)."""
    row = 2 * args.num_kv_heads * args.head_dim * jnp.dtype(KV_DTYPES[args.kv_dtype]).itemsize
    return row + (2 * args.num_kv_heads * 4 if args.kv_dtype == "int8" else 0)


def min_bytes_moved(args, q, md: AttentionMetadata) -> int:
    """Every KV row of every sequence read once, q read and out written once, new KV written."""
    kv_rows = int(np.sum(np.asarray(md.kv_lens)))
    new_rows = q.shape[0]
    return (kv_rows + new_rows) * kv_row_bytes(args) + 2 * q.size * q.dtype.itemsize


def timed_call(fn, step: list, *, carry_cache: bool) -> float:
    """Seconds of one ``fn(*step)`` to its result; a returned cache is fed back to ``step``."""
    start = time.perf_counter()
    out = fn(*step)
    jax.block_until_ready(out)
    seconds = time.perf_counter() - start
    if carry_cache:
        step[3] = out[1]  # the donated cache comes back as that layer's next input
    return seconds


def median_seconds(fn, layers: list[list], iters: int, *, carry_cache: bool) -> float:
    """Median wall time of ``fn(*step)`` over ``iters`` calls, call i on layer i's step in
    turn, after one warm-up call on each layer."""
    for step in layers:
        timed_call(fn, step, carry_cache=carry_cache)
    times = [timed_call(fn, layers[i % len(layers)], carry_cache=carry_cache) for i in range(iters)]
    return float(np.median(times))


def kernel_against_ceiling(args, layers: list[list], kv_lens: list[int], l3_bytes: int, seed):
    """decode_ceiling's measurements for the decode-only step over ``layers``' pools: the
    kernel alone out of cache against the read ceilings, and with its KV in the caches (the
    first in_cache_seqs sequences, one pool, as many calls a pass as there are layers)."""
    sm_scale = args.head_dim**-0.5
    kv_bytes = sum(kv_lens) * kv_row_bytes(args)
    seconds, rates, paged = decode_against_ceiling(layers, kv_bytes, args.iters, sm_scale)
    ceiling = ceiling_result(kv_bytes, seconds, rates, paged)
    seqs = in_cache_seqs(kv_lens, kv_row_bytes(args), l3_bytes)
    one_pool = argparse.Namespace(**{**vars(args), "layers": 1})
    step = build_layers(one_pool, [1] * seqs, kv_lens[:seqs], seed)[0]
    cached_bytes = sum(kv_lens[:seqs]) * kv_row_bytes(args)
    ceiling["in_cache"] = decode_in_cache(
        step, cached_bytes, len(layers), max(1, args.iters // len(layers)), sm_scale
    )
    return ceiling


def auto_layers(kv_bytes: int, l3_bytes: int) -> int:
    """Pools enough that the others' KV between two uses of one is >= twice the L3."""
    return min(MAX_LAYERS, 1 + max(1, math.ceil(2 * l3_bytes / max(kv_bytes, 1))))


def implementations(args, on_tpu: bool):
    """(name, jitted fn(q, k, v, cache, md), returns a cache) for each implementation."""
    options = dict(sm_scale=args.head_dim**-0.5)
    impls = [
        (
            "xla",
            jax.jit(functools.partial(xla_rpa.ragged_paged_attention, **options),
                    donate_argnums=3),
            True,
        ),
    ]  # fmt: skip
    if not on_tpu:
        if jax.default_backend() == "cpu" and native_attention.unavailable_reason() is None:
            native = functools.partial(native_attention.ragged_paged_attention, **options)
            impls.append(("native", jax.jit(native, donate_argnums=3), True))
        return impls
    ours = functools.partial(ragged_paged_attention, **options)
    impls.append(("ours", jax.jit(ours, donate_argnums=3), True))
    if args.kv_dtype != "int8":
        from jax.experimental.pallas.ops.tpu.ragged_paged_attention import (
            ragged_paged_attention as jax_rpa,
        )

        def shipped(q, k, v, cache, md):
            scales = {}
            if cache.pages.dtype == FP8_DTYPE:
                scales = dict(k_scale=1.0, v_scale=1.0)  # the step's tensor scales are 1
            return jax_rpa(
                q, cache.pages, md.kv_lens, md.page_indices, md.cu_q_lens, md.num_seqs,
                **options, **scales,
            )  # fmt: skip

        impls.append(("jax-shipped", jax.jit(shipped), False))
    return impls


def spec_bandwidth() -> tuple[str | None, float | None]:
    """(chip name, HBM bytes/s) from the hardware spec table, (None, None) if unknown."""
    try:
        from claimbench.hardware.chips import chip_for_device, get_chip
    except ImportError:
        return None, None
    device = jax.devices()[0]
    chip = chip_for_device(device.platform, device.device_kind)
    return (chip, get_chip(chip).hbm_bytes_per_s) if chip else (None, None)


def main(argv: list[str] | None = None) -> None:
    set_default_jax_platforms()  # before JAX starts a backend: no TPU runtime off a TPU host
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kv-dtype", choices=list(KV_DTYPES), default="bf16")
    parser.add_argument("--num-q-heads", type=int, default=32)
    parser.add_argument("--num-kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--decode-seqs", type=int, default=None, help="default 128 (8 off TPU)")
    parser.add_argument("--context-len", type=int, default=None, help="default 2048 (256 off)")
    parser.add_argument("--prefill-seqs", type=int, default=4)
    parser.add_argument("--chunk-len", type=int, default=None, help="default 512 (64 off TPU)")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument(
        "--layers",
        type=int,
        default=None,
        help="KV pools the calls rotate over (default: enough that the KV read between two "
        f"uses of one is >= 2x the L3, at most {MAX_LAYERS})",
    )
    parser.add_argument(
        "--page-order",
        choices=["random", "adjacent"],
        default="random",
        help="each sequence's pages in random order over the pool, or adjacent (in a run)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)
    for name in ("iters", "layers", "decode_seqs", "context_len", "chunk_len", "prefill_seqs"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.exit(2, f"--{name.replace('_', '-')} must be >= 1, got {value}\n")
    on_tpu = jax.default_backend() == "tpu"
    args.decode_seqs = args.decode_seqs or (128 if on_tpu else 8)
    args.context_len = args.context_len or (2048 if on_tpu else 256)
    args.chunk_len = args.chunk_len or (512 if on_tpu else 64)
    if not on_tpu and not args.json:
        print(
            f"platform {jax.default_backend()}: the Pallas kernels need a TPU to be timed "
            "(interpret mode is a simulator): the XLA path and, on CPU, the native kernels."
        )
    rng = np.random.default_rng(0)

    def context(n: int) -> list[int]:
        return [int(x) for x in rng.integers(args.context_len // 2, args.context_len, n)]

    decode_context = context(args.decode_seqs)
    batches = {
        "decode-heavy": (
            [1] * args.decode_seqs + [args.chunk_len],
            decode_context + [args.chunk_len],
        ),
        "prefill-heavy": (
            [1] * 4 + [args.chunk_len] * args.prefill_seqs,
            context(4) + [args.chunk_len] * args.prefill_seqs,
        ),
        "decode-only": ([1] * args.decode_seqs, decode_context),
    }
    decode_kv_bytes = sum(decode_context) * kv_row_bytes(args)
    l3_bytes = native_bandwidth.last_level_cache_bytes()
    args.layers = args.layers or auto_layers(decode_kv_bytes, l3_bytes)
    chip, bytes_per_s = spec_bandwidth()
    results = []
    prefill, prefill_flops = None, None  # the native prefill against the multiply-add peak
    # Off TPU the ceiling is measured beside the native decode kernel, where there is one.
    reason = native_attention.unavailable_reason() or "the native decode kernel was not timed"
    ceiling = None if on_tpu else {"unavailable": reason}
    for seed, (batch, (q_lens, kv_lens)) in enumerate(batches.items()):
        for name, fn, carry in implementations(args, on_tpu):
            layers = build_layers(args, q_lens, kv_lens, seed)  # fresh: donated caches are gone
            moved = min_bytes_moved(args, layers[0][0], layers[0][4])
            seconds = median_seconds(fn, layers, args.iters, carry_cache=carry)
            if (batch, name) == ("decode-only", "native"):
                ceiling = kernel_against_ceiling(args, layers, kv_lens, l3_bytes, seed)
            if (batch, name) == ("prefill-heavy", "native"):
                prefill_flops = attention_flops(q_lens, kv_lens, args.num_q_heads, args.head_dim)
                prefill = prefill_against_peak(
                    lambda iters, fn=fn, layers=layers, carry=carry: median_seconds(
                        fn, layers, iters, carry_cache=carry
                    ),
                    prefill_flops,
                    args.iters,
                )
            del layers
            achieved = moved / seconds
            results.append(
                dict(batch=batch, impl=name, kv_dtype=args.kv_dtype, ms=seconds * 1e3,
                     bytes_moved=moved, gb_per_s=achieved / 1e9, chip=chip,
                     pct_of_spec=None if bytes_per_s is None else 100 * achieved / bytes_per_s)
            )  # fmt: skip
    rotation = dict(layers=args.layers, decode_kv_bytes=decode_kv_bytes, l3_bytes=l3_bytes)
    host = None if on_tpu else host_description()
    if args.json:
        print(json.dumps(dict(platform=jax.default_backend(), host=host, rotation=rotation,
                              results=results, read_ceiling=ceiling,
                              prefill_peak=prefill, prefill_flops=prefill_flops)))  # fmt: skip
        return
    if host is not None:
        print(f"host: {host_line(host)}; L3 {l3_bytes / 2**20:.0f} MiB")
    print(
        f"decode-only KV {decode_kv_bytes / 1e6:.1f} MB a call; {args.layers} layer pools in "
        f"turn ({args.layers * decode_kv_bytes / 1e6:.1f} MB of decode KV in all)"
    )
    if bytes_per_s is None:
        print("no HBM spec for this device: bandwidth is not shown as a % of spec")
    print(f"{'batch':<14} {'impl':<12} {'kv':<5} {'ms':>9} {'GB/s':>9} {'% spec':>7}")
    for r in results:
        pct = "-" if r["pct_of_spec"] is None else f"{r['pct_of_spec']:.1f}"
        print(
            f"{r['batch']:<14} {r['impl']:<12} {r['kv_dtype']:<5} {r['ms']:>9.3f} "
            f"{r['gb_per_s']:>9.1f} {pct:>7}"
        )
    if ceiling is not None:
        print(ceiling_report(ceiling))
    if prefill is not None:
        print("\n".join(prefill_report(prefill, prefill_flops)))


if __name__ == "__main__":
    main()
