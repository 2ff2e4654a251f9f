"""Attention metadata for one flattened, ragged engine step.

Every scheduled token of every sequence is packed into one array of
``num_tokens`` (padded to a bucket). Sequences are ordered decode-only first,
then prefill-only, then mixed, as in Ragged Paged Attention v3, so a kernel can
pick a specialised path per group from ``distribution``.

Every attention backend checks its inputs here (``check_inputs``: shapes, dtypes and
options, also under jit; ``check_metadata_values``: the metadata's values, when concrete).

Page 0 of every KV cache is the null page: the block manager never hands it
out, padded tokens write their K/V there and padded sequence slots point at it.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from claimbench.kernels.kv_quant import (
    F16_CONTAINER,
    FP8_DTYPE,
    LayerKV,
    int8_scales_shape,
    logical_dtype,
)

NULL_PAGE = 0
FLOAT_PAGE_DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16), jnp.dtype(jnp.float32))


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class AttentionMetadata:
    """Shapes use ``T`` = padded token count, ``N`` = padded sequence slots."""

    slot_mapping: jax.Array  # i32[T] page * page_size + offset of each new token's KV
    cu_q_lens: jax.Array  # i32[N + 1] start of each sequence's tokens in the flat batch
    kv_lens: jax.Array  # i32[N] KV length of each sequence after this step's write (0 = pad)
    page_indices: jax.Array  # i32[N, pages_per_seq] block table, NULL_PAGE where unused
    num_seqs: jax.Array  # i32[1] real sequences in this step
    distribution: jax.Array  # i32[3] ends of the decode-only, prefill-only, mixed groups

    @property
    def max_num_seqs(self) -> int:
        return self.kv_lens.shape[0]

    @property
    def pages_per_seq(self) -> int:
        return self.page_indices.shape[1]


# ---- input checks shared by every attention backend ------------------------------------


def check_inputs(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    cache: LayerKV,
    md: AttentionMetadata,
    *,
    sm_scale: float,
    sliding_window: int | None,
    soft_cap: float | None,
    page_head_dims: tuple[int, ...] | None = None,
    bit_containers: bool = True,
) -> None:
    """Raise ValueError, naming the values, unless the shapes, dtypes and options fit.

    q f[T, Hq, D], k and v f[T, Hkv, D], cache pages [num_pages, page_size, 2 * Hkv, W]
    with W in ``page_head_dims`` (default: D alone), scales as ``kv_quant`` lays them out
    for the page dtype (bit containers allowed unless ``bit_containers`` is False), every
    metadata array int32 of its documented shape. Shapes only: this runs under jit too.
    """
    if q.ndim != 3 or k.ndim != 3 or k.shape != v.shape:
        raise ValueError(
            f"expected q [T, Hq, D] and k, v [T, Hkv, D]; got q {q.shape}, k {k.shape}, v {v.shape}"
        )
    num_tokens, num_q_heads, head_dim = q.shape
    if k.shape[0] != num_tokens or k.shape[2] != head_dim:
        raise ValueError(f"k/v shape {k.shape} does not match q shape {q.shape} on T or D")
    num_kv_heads = k.shape[1]
    if num_q_heads % num_kv_heads:
        raise ValueError(f"num_q_heads={num_q_heads} not a multiple of num_kv_heads={num_kv_heads}")
    widths = page_head_dims or (head_dim,)
    pages = cache.pages
    if pages.ndim != 4 or pages.shape[2] != 2 * num_kv_heads or pages.shape[3] not in widths:
        raise ValueError(
            f"cache pages {pages.shape} should be [num_pages, page_size, "
            f"{2 * num_kv_heads}, {' or '.join(map(str, widths))}] for "
            f"num_kv_heads={num_kv_heads}, head_dim={head_dim}"
        )
    check_scales(cache, bit_containers=bit_containers)
    num_seqs_max, pages_per_seq = md.page_indices.shape
    expected = {
        "slot_mapping": (num_tokens,),
        "cu_q_lens": (num_seqs_max + 1,),
        "kv_lens": (num_seqs_max,),
        "page_indices": (num_seqs_max, pages_per_seq),
        "num_seqs": (1,),
        "distribution": (3,),
    }
    for name, shape in expected.items():
        array = getattr(md, name)
        if array.shape != shape or array.dtype != jnp.int32:
            raise ValueError(
                f"metadata {name} is {array.dtype}{list(array.shape)}, expected int32{list(shape)}"
            )
    if not isinstance(sm_scale, numbers.Real) or not np.isfinite(sm_scale):
        raise ValueError(f"sm_scale must be a finite Python number, got {sm_scale!r}")
    if sliding_window is not None and (not isinstance(sliding_window, int) or sliding_window < 1):
        raise ValueError(f"sliding_window must be None or an int >= 1, got {sliding_window!r}")
    if soft_cap is not None and (not isinstance(soft_cap, numbers.Real) or not soft_cap > 0):
        raise ValueError(f"soft_cap must be None or a number > 0, got {soft_cap!r}")


def check_scales(cache: LayerKV, *, bit_containers: bool = True) -> None:
    """Raise ValueError unless ``cache.scales`` is what its page dtype needs (kv_quant.py)."""
    pages, scales = cache.pages, cache.scales
    dtype = jnp.dtype(pages.dtype)
    if cache.f16_bits and dtype != F16_CONTAINER:
        raise ValueError(f"f16_bits pages must be {F16_CONTAINER} containers, got {dtype}")
    if bit_containers:
        dtype = logical_dtype(dtype)
    if dtype == jnp.int8:
        expected = int8_scales_shape(*pages.shape[:3])
    elif dtype == FP8_DTYPE:
        expected = (2,)
    elif dtype in FLOAT_PAGE_DTYPES:
        if scales is not None:
            raise ValueError(f"{dtype} pages take no scales, got scales {scales.shape}")
        return
    else:
        raise ValueError(f"unsupported page dtype {dtype}; expected bf16, f16, f32, int8 or fp8")
    if scales is None or scales.shape != expected or scales.dtype != jnp.float32:
        got = None if scales is None else f"{scales.dtype}{list(scales.shape)}"
        raise ValueError(f"{dtype} pages need scales float32{list(expected)}, got {got}")


def is_concrete(md: AttentionMetadata) -> bool:
    """Whether the metadata holds values (called outside jit), so they can be checked."""
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(md))


def check_metadata_values(
    md: AttentionMetadata, *, num_tokens: int, num_pages: int, page_size: int
) -> None:
    """Raise ValueError, naming the values, unless concrete metadata is self-consistent."""
    kv_lens = np.asarray(md.kv_lens)
    cu_q_lens = np.asarray(md.cu_q_lens)
    page_indices = np.asarray(md.page_indices)
    num_seqs = int(np.asarray(md.num_seqs)[0])
    decode_end, prefill_end, mixed_end = (int(x) for x in np.asarray(md.distribution))
    if not 0 <= num_seqs <= md.max_num_seqs:
        raise ValueError(f"num_seqs={num_seqs} outside [0, max_num_seqs={md.max_num_seqs}]")
    if not 0 <= decode_end <= prefill_end <= mixed_end == num_seqs:
        raise ValueError(
            f"distribution {[decode_end, prefill_end, mixed_end]} must be non-decreasing "
            f"group ends with the last equal to num_seqs={num_seqs}"
        )
    if cu_q_lens[0] != 0 or cu_q_lens[num_seqs] > num_tokens:
        raise ValueError(
            f"cu_q_lens must start at 0 and end at most at num_tokens={num_tokens}; "
            f"got cu_q_lens[0]={cu_q_lens[0]}, cu_q_lens[{num_seqs}]={cu_q_lens[num_seqs]}"
        )
    pages_per_seq = md.pages_per_seq
    for i in range(num_seqs):
        q_len, kv_len = int(cu_q_lens[i + 1] - cu_q_lens[i]), int(kv_lens[i])
        if not 1 <= q_len <= kv_len:
            raise ValueError(f"sequence {i}: need 1 <= q_len={q_len} <= kv_len={kv_len}")
        if i < decode_end and q_len != 1:
            raise ValueError(f"sequence {i} is in the decode group but has q_len={q_len}")
        num_used = -(-kv_len // page_size)
        if num_used > pages_per_seq:
            raise ValueError(
                f"sequence {i}: kv_len={kv_len} needs {num_used} pages of {page_size}, "
                f"block table has pages_per_seq={pages_per_seq}"
            )
        used = page_indices[i, :num_used]
        if used.min() < 0 or used.max() >= num_pages:
            raise ValueError(
                f"sequence {i}: page ids {used.tolist()} outside [0, num_pages={num_pages})"
            )
