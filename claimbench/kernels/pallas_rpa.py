"""Ragged paged attention as one Pallas TPU kernel per layer, with the KV write fused in.

The TPU counterpart of ``xla_rpa.ragged_paged_attention`` (same arguments, same
results), in the manner of Ragged Paged Attention v3: the flattened mixed batch of
decode tokens and prefill chunks goes through one ``pallas_call`` whose grid has one step
per real sequence. The metadata sits in SMEM (scalar prefetch); each sequence's KV pages
stream HBM -> VMEM through its block table in double-buffered async copies; the softmax is
online and in f32; a GQA group of query heads shares each KV head's tile; decode
sequences (the first ``distribution[0]``) take a path with a single query row and no
query-block loop. The step's new K/V are quantized to the page format here (the same
``kv_quant.quantize_rows`` as the XLA path, so the cache bits agree), and the kernel
writes them into the pages from VMEM while it attends, with the cache aliased in place.
The kernel body is ``rpa_kernel.py``; block sizes per chip are in ``rpa_blocks.py``.

Pages may store head_dim padded to a multiple of 128 lanes (``page_head_dim``): TPU
lays a row-major [..., 2 * num_kv_heads, 64] array out in 128-lane tiles anyway, and with
pages of the model's 64 its default layout puts the page axis minor instead, so XLA would
copy each layer's whole cache into the kernel's row-major layout and back every step.
Padded pages alias in place; q, k and v are zero-padded to match (zero lanes add nothing
to q.k, and the output's padded lanes, p.v over zero lanes, are sliced off).

Off TPU the kernel runs in Pallas TPU interpret mode (slow, for tests).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from claimbench.kernels.kv_quant import (
    FP8_DTYPE,
    LayerKV,
    interleave_kv,
    page_row_scales,
    quantize_rows,
    to_container,
    value_dtype,
)
from claimbench.kernels.metadata import (
    AttentionMetadata,
    check_inputs,
    check_metadata_values,
    is_concrete,
)
from claimbench.kernels.rpa_blocks import chip_generation, default_block_sizes
from claimbench.kernels.rpa_kernel import (
    LANES,
    NUM_SEM_KINDS,
    NUM_STATE,
    KernelConfig,
    rpa_kernel,
)
from claimbench.kernels.scale_rows import (
    gather_scale_rows,
    merge_new_scales,
    write_scale_rows,
)


def ragged_paged_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    cache: LayerKV,
    md: AttentionMetadata,
    *,
    sm_scale: float,
    sliding_window: int | None = None,
    soft_cap: float | None = None,
    num_kv_pages_per_block: int | None = None,
    num_queries_per_block: int | None = None,
    vmem_limit_bytes: int | None = None,
    interpret: bool | pltpu.InterpretParams | None = None,
    generation: str | None = None,
) -> tuple[jax.Array, LayerKV]:
    """Write the step's new K/V into the cache and attend every token over its sequence.

    q: f[T, num_q_heads, D]; k, v: f[T, num_kv_heads, D]; cache.pages:
    [num_pages, page_size, 2 * num_kv_heads, D or page_head_dim(D)] in bf16/f32 (scales
    None), f16 as bf16 containers of its bits (``cache.f16_bits``, scales None: Mosaic takes
    no f16 arrays; kv_quant.kv_container_dtype), int8 (scales f32[num_pages, page_size * 2 *
    num_kv_heads padded to 128 lanes], kv_quant.int8_scales_shape) or fp8 e4m3 (scales
    f32[2]).
    md: kv_lens i32[N] (after this step's write), cu_q_lens i32[N + 1], page_indices
    i32[N, pages_per_seq], num_seqs i32[1], distribution i32[3] (decode-only first).
    Token t of sequence i sits at position kv_lens[i] - q_len_i + (t - cu_q_lens[i]) and
    attends to positions <= its own (and > position - sliding_window if set); logits are
    ``soft_cap * tanh(s / soft_cap)`` if soft_cap is set.

    Returns (f[T, num_q_heads, D], cache with the new rows written). Rows of tokens that
    belong to no sequence are zero; their K/V are not written (``md.slot_mapping`` is
    only checked for shape: positions come from kv_lens and cu_q_lens).

    The cache must be in device memory (JAX's default memory kind, HBM on TPU): a cache in
    host memory is refused outside jit (ValueError); inside a caller's jit it cannot be
    seen, and libtpu fails to compile it (donated: libtpu 0.0.42 aborts). The pages are
    pinned to HBM for the call (XLA would otherwise stage a layer's cache small enough for
    VMEM there whole, in and out, every step). Donated by a caller's jit
    (``donate_argnums``) the cache is updated in place at every page dtype, whatever else
    the caller returns; not donated, XLA writes the result into a new cache, a copy of
    every page.

    Knobs (keyword-only): ``num_kv_pages_per_block`` pages per KV block,
    ``num_queries_per_block`` query tokens per block in the prefill/mixed path (both
    default per TPU generation, see ``rpa_blocks``), ``vmem_limit_bytes`` (None: the
    compiler's default scoped VMEM);
    ``interpret``: None runs compiled on TPU and in interpret mode elsewhere, True or an
    ``InterpretParams`` forces interpret mode, False forces compilation;
    ``generation``: the TPU generation whose block sizes to default to ("v5e", "v6e", ...;
    None: the running chip's), for compiling ahead of time for a chip that is not here.
    Shapes and knobs are checked up front (ValueError); metadata values too when they are
    concrete (called outside jit).
    """
    head_dim = q.shape[-1]
    check_inputs(
        q,
        k,
        v,
        cache,
        md,
        sm_scale=sm_scale,
        sliding_window=sliding_window,
        soft_cap=soft_cap,
        page_head_dims=(head_dim, page_head_dim(head_dim)),
        bit_containers=False,  # Mosaic reads bf16 and fp8 pages as what they are
    )
    if cache.pages.dtype == jnp.float16:
        raise ValueError(
            "the Pallas kernel takes f16 pages as bf16 containers of their bits, not float16 "
            "arrays: allocate_kv_cache(..., attention_backend='pallas') (LayerKV.f16_bits)"
        )
    num_tokens = q.shape[0]
    page_size = cache.pages.shape[1]
    pages_per_seq = md.pages_per_seq
    defaults = default_block_sizes(generation or chip_generation())
    if num_kv_pages_per_block is None:
        num_kv_pages_per_block = min(pages_per_seq, max(1, defaults.kv_tokens // page_size))
    if num_queries_per_block is None:
        num_queries_per_block = max(1, min(defaults.q_tokens, num_tokens))
    check_knobs(num_kv_pages_per_block, num_queries_per_block, vmem_limit_bytes, pages_per_seq)
    check_device_memory(cache)
    if is_concrete(md):
        check_metadata_values(
            md, num_tokens=num_tokens, num_pages=cache.pages.shape[0], page_size=page_size
        )
    if interpret is None:
        interpret = jax.default_backend() != "tpu"
    if interpret is True:
        interpret = pltpu.InterpretParams()
    elif not isinstance(interpret, (bool, pltpu.InterpretParams)):
        raise ValueError(f"interpret must be None, a bool or InterpretParams, got {interpret!r}")
    return _call_kernel(
        q,
        k,
        v,
        cache,
        md,
        sm_scale=float(sm_scale),
        sliding_window=sliding_window,
        soft_cap=None if soft_cap is None else float(soft_cap),
        bkv_pages=num_kv_pages_per_block,
        bq=num_queries_per_block,
        vmem_limit_bytes=vmem_limit_bytes,
        interpret=interpret,
    )


def page_head_dim(head_dim: int) -> int:
    """The pages' last axis for this kernel: head_dim rounded up to whole 128-lane tiles."""
    return -(-head_dim // LANES) * LANES


def _quant_mode(pages_dtype: jnp.dtype) -> str:
    if pages_dtype == jnp.int8:
        return "int8"
    if pages_dtype == FP8_DTYPE:
        return "fp8"
    return "none"


@functools.partial(
    jax.jit,
    static_argnames=(
        "sm_scale",
        "sliding_window",
        "soft_cap",
        "bkv_pages",
        "bq",
        "vmem_limit_bytes",
        "interpret",
    ),
)
def _call_kernel(
    q,
    k,
    v,
    cache: LayerKV,
    md: AttentionMetadata,
    *,
    sm_scale,
    sliding_window,
    soft_cap,
    bkv_pages,
    bq,
    vmem_limit_bytes,
    interpret,
):
    model_head_dim = q.shape[2]
    pages = cache.pages
    if pages.shape[3] != model_head_dim:
        lanes = [(0, 0), (0, 0), (0, pages.shape[3] - model_head_dim)]
        q, k, v = jnp.pad(q, lanes), jnp.pad(k, lanes), jnp.pad(v, lanes)
    out_dtype = q.dtype
    if cache.f16_bits:
        # TPUs have no f16 arithmetic and Mosaic neither loads nor stores f16 vectors: the
        # pool is allocated as bf16-typed containers of f16 bits (DMAs copy them exactly),
        # the kernel decodes the bits to f32 and attends in f32, as XLA computes f16 dots.
        # Only the step's new rows are bitcast here; the pool never is (on TPU that bitcast
        # is a pass over the whole cache: kv_quant.F16_CONTAINER).
        q = q.astype(jnp.float32)
    num_q_heads, head_dim = q.shape[1:]
    num_kv_heads = k.shape[1]
    _, page_size, num_rows, _ = pages.shape
    quant = "f16" if cache.f16_bits else _quant_mode(pages.dtype)
    kv_new, new_scales = quantize_rows(interleave_kv(k, v), cache.scales, value_dtype(cache))
    kv_new = to_container(kv_new, pages.dtype)
    scales = cache.scales
    if quant == "int8":
        # Every scale the kernel needs, the new tokens' included, arrives per KV block
        # (scale_rows.py); the pool's rows of the pages written are replaced by DMA.
        rows = gather_scale_rows(
            scales, _pad_table(md, bkv_pages), md.kv_lens, page_size=page_size, interpret=interpret
        )
        rows = merge_new_scales(rows, new_scales, md, page_size)
        scales = write_scale_rows(scales, rows, md, page_size=page_size, interpret=interpret)
    cfg = KernelConfig(
        sm_scale=sm_scale,
        sliding_window=sliding_window,
        soft_cap=soft_cap,
        bq=bq,
        bkv=bkv_pages * page_size,
        page_size=page_size,
        pages_per_seq=md.pages_per_seq,
        num_kv_heads=num_kv_heads,
        group=num_q_heads // num_kv_heads,
        quant=quant,
    )
    hbm = pl.BlockSpec(memory_space=pl.ANY)
    scalars = (md.kv_lens, md.page_indices.reshape(-1), md.cu_q_lens, md.distribution)
    inputs, in_specs = [q, kv_new], [hbm, hbm]
    if quant == "int8":
        inputs.append(block_row_scales(rows, page_size, num_rows, bkv_pages))
        in_specs.append(hbm)
    if quant == "fp8":
        inputs.append(cache.scales.astype(jnp.float32))
        in_specs.append(pl.BlockSpec(memory_space=pltpu.SMEM))
    aliases = {len(scalars) + len(inputs): 1}
    # The pages stay in HBM. Left to XLA, a layer's cache small enough for VMEM is
    # prefetched there whole before the call and copied back after it, every step.
    inputs.append(pltpu.with_memory_space_constraint(pages, pltpu.HBM))
    out_shapes = [
        jax.ShapeDtypeStruct(q.shape, q.dtype),
        pltpu.HBM(pages.shape, pages.dtype),
        # Never written, never returned: it keeps the call from being a caller's whole
        # result. XLA:TPU puts the pinned pages in memory space S(9); were the call the
        # program's root (a caller's jit returning just (out, cache), nothing sliced, cast
        # or passed through beside them: bf16 pages at Llama-3-8B's layer shape), XLA pins
        # the donated parameter too, copies it back to its declared layout, and the alias
        # of that copy to the pinned output fails verification (libtpu 0.0.42).
        jax.ShapeDtypeStruct((1,), jnp.int32),
    ]
    # Tokens that belong to no sequence are never visited: their rows stay zero.
    aliases[len(scalars) + len(inputs)] = 0
    inputs.append(jnp.zeros_like(q))
    in_specs += [hbm] * (len(inputs) - len(in_specs))

    rows_per_q_block = bq * cfg.group
    scratch = [
        pltpu.VMEM((2, bq, num_q_heads, head_dim), q.dtype),  # q blocks
        pltpu.VMEM((2, bq, num_q_heads, head_dim), q.dtype),  # output blocks
        pltpu.VMEM((2, cfg.bkv, num_rows, head_dim), pages.dtype),  # KV blocks
    ]
    if quant == "int8":
        scratch.append(pltpu.VMEM((2, num_rows, cfg.bkv), jnp.float32))  # their row scales
    scratch += [
        pltpu.VMEM((num_kv_heads, rows_per_q_block, LANES), jnp.float32),  # running max m
        pltpu.VMEM((num_kv_heads, rows_per_q_block, LANES), jnp.float32),  # running sum l
        pltpu.VMEM((num_kv_heads, rows_per_q_block, head_dim), jnp.float32),  # acc
        pltpu.SemaphoreType.DMA((NUM_SEM_KINDS, 2)),
        pltpu.SMEM((NUM_STATE,), jnp.int32),
    ]
    out_specs = [hbm] * len(out_shapes)
    results = pl.pallas_call(
        functools.partial(rpa_kernel, cfg=cfg),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=len(scalars),
            in_specs=in_specs,
            out_specs=out_specs,
            grid=(md.num_seqs[0],),
            scratch_shapes=scratch,
        ),
        out_shape=out_shapes,
        input_output_aliases=aliases,
        # Steps share buffers and in-flight DMAs, so the grid runs in order on one core.
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("arbitrary",), vmem_limit_bytes=vmem_limit_bytes
        ),
        interpret=interpret,
        name="claimbench_ragged_paged_attention",
    )(*scalars, *inputs)
    out = results[0][..., :model_head_dim].astype(out_dtype)
    return out, LayerKV(results[1], scales, cache.f16_bits)


def _pad_table(md: AttentionMetadata, bkv_pages: int) -> jax.Array:
    """The block tables padded with the null page to whole KV blocks."""
    return jnp.pad(md.page_indices, ((0, 0), (0, -md.pages_per_seq % bkv_pages)))


def block_row_scales(rows: jax.Array, page_size: int, num_rows: int, bkv_pages: int) -> jax.Array:
    """Gathered int8 scale rows f32[N, num_blocks * bkv_pages, L] ->
    f32[N, num_blocks, 2H, bkv_pages * page_size]: each KV block's scales with tokens on
    lanes, so the kernel fetches a block's with one DMA and scales a head's scores (and
    probabilities) by one lane row. A small array: ``N * pages_per_seq * L`` floats a
    layer, 4 / page_head_dim of the page bytes a step reading every table in full moves."""
    num_seqs = rows.shape[0]
    tokens = page_row_scales(rows, page_size, num_rows)  # [N, pages, page_size, 2H]
    blocks = tokens.reshape(num_seqs, -1, bkv_pages * page_size, num_rows)
    return blocks.transpose(0, 1, 3, 2)


def check_device_memory(cache: LayerKV) -> None:
    """Raise ValueError if a concrete cache array lives outside device memory (a traced one
    carries no memory kind to check)."""
    for name, x in (("pages", cache.pages), ("scales", cache.scales)):
        if x is None or isinstance(x, jax.core.Tracer):
            continue
        kind = getattr(getattr(x, "sharding", None), "memory_kind", None)
        if kind not in (None, "device"):
            raise ValueError(
                f"cache.{name} is in {kind!r} memory: the kernel reads and writes the cache "
                "in device memory (jax.device_put it there first)"
            )


def check_knobs(
    num_kv_pages_per_block: int,
    num_queries_per_block: int,
    vmem_limit_bytes: int | None,
    pages_per_seq: int,
) -> None:
    """Raise ValueError unless the block sizes are usable for this block table."""
    if not isinstance(num_kv_pages_per_block, int) or not (
        1 <= num_kv_pages_per_block <= pages_per_seq
    ):
        raise ValueError(
            f"num_kv_pages_per_block={num_kv_pages_per_block!r} must be an int in "
            f"[1, pages_per_seq={pages_per_seq}]"
        )
    if not isinstance(num_queries_per_block, int) or num_queries_per_block < 1:
        raise ValueError(f"num_queries_per_block={num_queries_per_block!r} must be an int >= 1")
    if vmem_limit_bytes is not None and (
        not isinstance(vmem_limit_bytes, int) or vmem_limit_bytes < 1
    ):
        raise ValueError(f"vmem_limit_bytes={vmem_limit_bytes!r} must be None or an int >= 1")
