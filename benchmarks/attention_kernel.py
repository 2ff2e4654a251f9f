"""Our attention kernels side by side: Pallas (TPU), JAX's shipped kernel, native CPU, XLA.

    python benchmarks/attention_kernel.py [--kv-dtype bf16|f32|int8|fp8] [--iters 20] [--json]

Two synthetic engine steps, each one attention layer call: decode-heavy (--decode-seqs
sequences decoding one token over --context-len tokens of context, plus one prefill
chunk) and prefill-heavy (--prefill-seqs chunks of --chunk-len tokens, plus a few
decodes). For each implementation: the median wall time over --iters calls (compilation
and warm-up excluded) and the achieved HBM bandwidth, i.e. the bytes the step must move at
least (every KV row read once, q and out once, the new KV rows written once) over that
time, as a percentage of the chip's spec bandwidth (claimbench.hardware.chips).

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
import time

import jax
import jax.numpy as jnp
import numpy as np

from claimbench.kernels import native_attention, xla_rpa
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


def build_step(args, q_lens: list[int], kv_lens: list[int], seed: int):
    """q, k, v, cache and metadata for sequences given in group order (decodes first)."""
    rng = np.random.default_rng(seed)
    page_size, num_seqs = args.page_size, len(q_lens)
    pages_per_seq = -(-max(kv_lens) // page_size)
    num_pages = 1 + num_seqs * pages_per_seq
    # Page 0 is the null page: real sequences get pages 1.. in random order.
    page_indices = 1 + rng.permutation(num_pages - 1).reshape(num_seqs, pages_per_seq)
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
    old = jax.random.normal(key_c, (num_pages, page_size, 2 * hkv, d), dtype)
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
    return q, k, v, cache, md


def min_bytes_moved(q, cache: LayerKV, md: AttentionMetadata) -> int:
    """Every KV row of every sequence read once, q read and out written once, new KV written."""
    row_bytes = cache.pages.shape[2] * cache.pages.shape[3] * cache.pages.dtype.itemsize
    if cache.pages.dtype == jnp.int8:
        row_bytes += cache.pages.shape[2] * 4  # the row scales
    kv_rows = int(np.sum(np.asarray(md.kv_lens)))
    new_rows = q.shape[0]
    return kv_rows * row_bytes + new_rows * row_bytes + 2 * q.size * q.dtype.itemsize


def median_seconds(fn, args, iters: int, *, carry_cache: bool) -> float:
    """Median wall time of ``fn(*args)`` after a warm-up call; a returned cache is fed back."""
    args = list(args)
    out = fn(*args)
    jax.block_until_ready(out)
    times = []
    for _ in range(iters):
        if carry_cache:
            args[3] = out[1]  # the donated cache comes back as the next call's input
        start = time.perf_counter()
        out = fn(*args)
        jax.block_until_ready(out)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


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


def main() -> None:
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
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args()
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

    batches = {
        "decode-heavy": (
            [1] * args.decode_seqs + [args.chunk_len],
            context(args.decode_seqs) + [args.chunk_len],
        ),
        "prefill-heavy": (
            [1] * 4 + [args.chunk_len] * args.prefill_seqs,
            context(4) + [args.chunk_len] * args.prefill_seqs,
        ),
    }
    chip, bytes_per_s = spec_bandwidth()
    results = []
    for seed, (batch, (q_lens, kv_lens)) in enumerate(batches.items()):
        for name, fn, carry in implementations(args, on_tpu):
            step = build_step(args, q_lens, kv_lens, seed)  # fresh: a donated cache is gone
            moved = min_bytes_moved(step[0], step[3], step[4])
            seconds = median_seconds(fn, step, args.iters, carry_cache=carry)
            achieved = moved / seconds
            results.append(
                dict(batch=batch, impl=name, kv_dtype=args.kv_dtype, ms=seconds * 1e3,
                     bytes_moved=moved, gb_per_s=achieved / 1e9, chip=chip,
                     pct_of_spec=None if bytes_per_s is None else 100 * achieved / bytes_per_s)
            )  # fmt: skip
    if args.json:
        print(json.dumps(dict(platform=jax.default_backend(), results=results)))
        return
    if bytes_per_s is None:
        print("no HBM spec for this device: bandwidth is not shown as a % of spec")
    print(f"{'batch':<14} {'impl':<12} {'kv':<5} {'ms':>9} {'GB/s':>9} {'% spec':>7}")
    for r in results:
        pct = "-" if r["pct_of_spec"] is None else f"{r['pct_of_spec']:.1f}"
        print(
            f"{r['batch']:<14} {r['impl']:<12} {r['kv_dtype']:<5} {r['ms']:>9.3f} "
            f"{r['gb_per_s']:>9.1f} {pct:>7}"
        )


if __name__ == "__main__":
    main()
