"""The Pallas TPU kernel body of ragged paged attention (see ``pallas_rpa.py``).

One grid step per real sequence, in the metadata's order (decode-only, prefill-only,
mixed). A step walks its sequence's query blocks of ``bq`` tokens, and for each one the KV
blocks of ``bkv`` tokens that the block's causal (and sliding-window) span touches:

    for qb in q blocks of the sequence:            # one iteration for a decode sequence
        wait q block qb, prefetch the next q block
        for kb in KV blocks visible to qb:
            prefetch the next KV block into the other buffer (maybe the next sequence's)
            wait KV block kb: cached rows from the sequence's pages, new rows from kv_new
            start writing qb's new rows of kb from VMEM into their cache pages
            online-softmax update, one GQA group of query heads per KV head
        out = acc / l into an output buffer, sent to HBM asynchronously

The new tokens' K/V are read from ``kv_new`` (never from the cache pages being written),
so the write-back DMAs race with nothing and finish while later blocks compute; a buffer
slot is refilled only after its write-back has landed. Every DMA is waited for with a
descriptor of the same total size, so the bookkeeping between grid steps is just the slot
indices and the row counts of in-flight writes, kept in SMEM.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from claimbench.kernels.online_softmax import MASK_VALUE

LANES = 128  # m and l are kept lane-replicated: a [rows, 1] VMEM slice would be unaligned

# Slots of the SMEM bookkeeping vector that survives across grid steps.
Q_SLOT, KV_SLOT, O_SLOT = 0, 1, 2
WB_ROWS = 3  # + slot: rows of the in-flight cache write-back from that KV buffer
O_ROWS = 5  # + slot: rows of the in-flight output send from that output buffer
NUM_STATE = 8

# Rows of the DMA semaphore array, one pair (by buffer slot) per kind of transfer.
SEM_Q, SEM_KV, SEM_SCALE, SEM_WB, SEM_O = range(5)
NUM_SEM_KINDS = 5


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """Static parameters of one kernel instance."""

    sm_scale: float
    sliding_window: int | None
    soft_cap: float | None
    bq: int  # query tokens per block in the prefill/mixed path
    bkv: int  # KV tokens per block (a whole number of pages)
    page_size: int
    pages_per_seq: int
    num_kv_heads: int
    group: int  # query heads per KV head
    # "none" | "int8" (per-token row scales) | "fp8" (per-tensor scales) | "f16" (f16 bits in
    # bf16-typed pages, decoded to f32 on load)
    quant: str


def f16_bits_to_f32(x: jax.Array) -> jax.Array:
    """f16 values whose bits are held in a bf16-typed array -> f32, with 32-bit integer ops
    only. bf16 -> f32 is a 16-bit shift of the bits, which recovers them, except that a
    processor flushing subnormals reads bf16 subnormals (f16 below 7.6e-6) as zero."""
    h = lax.shift_right_logical(lax.bitcast_convert_type(x.astype(jnp.float32), jnp.int32), 16)
    exponent, mantissa = h & 0x7C00, h & 0x3FF
    # Normal: exponent and mantissa moved into f32's fields, the bias moved from 15 to 127.
    normal = lax.bitcast_convert_type(lax.shift_left(h & 0x7FFF, 13) + (112 << 23), jnp.float32)
    subnormal = mantissa.astype(jnp.float32) * jnp.float32(2.0**-24)
    inf_or_nan = lax.bitcast_convert_type(lax.shift_left(mantissa, 13) | 0x7F800000, jnp.float32)
    value = jnp.where(exponent == 0, subnormal, normal)
    value = jnp.where(exponent == 0x7C00, inf_or_nan, value)
    return jnp.where((h & 0x8000) != 0, -value, value)


def rpa_kernel(*refs, cfg: KernelConfig):
    """Kernel body; the ref order is built by ``pallas_rpa._call_kernel``.

    Scalar prefetch (SMEM): kv_lens i32[N], page_indices i32[N * pages_per_seq],
    cu_q_lens i32[N + 1], distribution i32[3].
    Inputs (HBM): q [T, Hq, D], kv_new [T, 2H, D] (page dtype), then for int8 the
    scales of every KV block of every sequence f32[N, num_blocks, 2H, bkv] (already
    holding the new tokens', see ``block_row_scales``), for fp8 tensor_scales f32[2]
    (SMEM); the aliased pages and the aliased zero output.
    Outputs (HBM): out [T, Hq, D], pages, a guard i32[1] that is never written.
    Scratch: q/out buffers [2, bq, Hq, D], KV buffers [2, bkv, 2H, D], (int8 scale
    buffers f32[2, 2H, bkv]), m/l f32[H, bq * G, 128], acc f32[H, bq * G, D],
    DMA semaphores [5, 2], SMEM state i32[8].
    """
    refs = list(refs)
    kv_lens_ref, page_indices_ref, cu_q_lens_ref, distribution_ref = refs[:4]
    del refs[:4]
    q_hbm, kv_new_hbm = refs.pop(0), refs.pop(0)
    block_scales_hbm = refs.pop(0) if cfg.quant == "int8" else None
    tensor_scales_ref = refs.pop(0) if cfg.quant == "fp8" else None
    refs.pop(0)  # the input side of the aliased pages: read and written through the output
    refs.pop(0)  # the zero output buffer, aliased to out_hbm
    out_hbm, pages_hbm = refs.pop(0), refs.pop(0)
    refs.pop(0)  # the guard output, never written (pallas_rpa._call_kernel says why)
    q_bufs, o_bufs, kv_bufs = refs.pop(0), refs.pop(0), refs.pop(0)
    scale_bufs = refs.pop(0) if cfg.quant == "int8" else None
    m_ref, l_ref, acc_ref, sems, state = refs
    del refs

    bq, bkv, page_size = cfg.bq, cfg.bkv, cfg.page_size
    group, num_kv_heads = cfg.group, cfg.num_kv_heads
    seq = pl.program_id(0)
    num_seqs = pl.num_programs(0)

    def dma(src, dst, sem):
        return pltpu.make_async_copy(src, dst, sem)

    def wait_rows(buf, sem, rows):
        """Wait on ``sem`` for ``rows`` leading rows of ``buf``, however many DMAs sent them."""
        dma(buf.at[pl.ds(0, rows)], buf.at[pl.ds(0, rows)], sem).wait()

    # ---- the schedule: which q block and KV blocks each sequence visits -------------------

    def seq_info(i):
        """(q_start, q_len, kv_len, new_start) of sequence i; new_start = first new position."""
        i = jnp.minimum(i, num_seqs - 1)  # "next sequence" lookups past the end stay in range
        q_start = cu_q_lens_ref[i]
        q_len = cu_q_lens_ref[i + 1] - q_start
        kv_len = kv_lens_ref[i]
        return q_start, q_len, kv_len, kv_len - q_len

    def block_span(i, qb):
        """Positions [first_pos, last_pos] of q block qb and its KV blocks [kb_start, kb_end)."""
        _, _, kv_len, new_start = seq_info(i)
        first_pos = new_start + qb * bq
        last_pos = jnp.minimum(first_pos + bq, kv_len) - 1
        if cfg.sliding_window is None:
            kb_start = jnp.int32(0)
        else:
            kb_start = jnp.maximum(first_pos - cfg.sliding_window + 1, 0) // bkv
        return first_pos, last_pos, kb_start, last_pos // bkv + 1

    def num_q_blocks(i):
        return pl.cdiv(seq_info(i)[1], bq)

    def next_q_ids(i, qb):
        last = qb + 1 == num_q_blocks(i)
        return jnp.where(last, i + 1, i), jnp.where(last, 0, qb + 1)

    def next_kv_ids(i, qb, kb):
        last_kb = kb + 1 == block_span(i, qb)[3]
        next_i, next_qb = next_q_ids(i, qb)
        next_i = jnp.where(last_kb, next_i, i)
        next_qb = jnp.where(last_kb, next_qb, qb)
        next_kb = jnp.where(last_kb, block_span(next_i, next_qb)[2], kb + 1)
        return next_i, next_qb, next_kb

    # ---- transfers -------------------------------------------------------------------------

    def q_rows(i, qb):
        q_start, q_len, _, _ = seq_info(i)
        return q_start + qb * bq, jnp.minimum(bq, q_len - qb * bq)

    def start_fetch_q(i, qb, slot):
        row, n = q_rows(i, qb)
        dma(q_hbm.at[pl.ds(row, n)], q_bufs.at[slot, pl.ds(0, n)], sems.at[SEM_Q, slot]).start()

    def wait_fetch_q(i, qb, slot):
        wait_rows(q_bufs.at[slot], sems.at[SEM_Q, slot], q_rows(i, qb)[1])

    def kv_block_rows(i, qb, kb):
        """Block kb holds positions [lo, hi): up to bkv, cut at q block qb's last position."""
        lo = kb * bkv
        return lo, jnp.minimum(lo + bkv, block_span(i, qb)[1] + 1)

    def page_of(i, position):
        return page_indices_ref[i * cfg.pages_per_seq + position // page_size]

    def start_fetch_kv(i, qb, kb, slot):
        wait_write_back(slot)  # the slot's previous block may still be streaming to the cache
        q_start, _, _, new_start = seq_info(i)
        lo, hi = kv_block_rows(i, qb, kb)
        cached_hi = jnp.minimum(hi, new_start)

        def fetch_page(p, carry):
            pos = lo + p * page_size
            n = jnp.minimum(page_size, cached_hi - pos)
            page = page_of(i, pos)
            dst = pl.ds(p * page_size, n)
            dma(
                pages_hbm.at[page, pl.ds(0, n)], kv_bufs.at[slot, dst], sems.at[SEM_KV, slot]
            ).start()
            return carry

        if scale_bufs is not None:  # the whole block's scales, cached and new tokens alike
            dma(block_scales_hbm.at[i, kb], scale_bufs.at[slot], sems.at[SEM_SCALE, slot]).start()

        lax.fori_loop(0, pl.cdiv(jnp.maximum(cached_hi - lo, 0), page_size), fetch_page, 0)
        new_lo = jnp.maximum(lo, new_start)

        @pl.when(hi > new_lo)
        def _fetch_new_rows():
            src = pl.ds(q_start + new_lo - new_start, hi - new_lo)
            dst = pl.ds(new_lo - lo, hi - new_lo)
            dma(kv_new_hbm.at[src], kv_bufs.at[slot, dst], sems.at[SEM_KV, slot]).start()

    def wait_fetch_kv(i, qb, kb, slot):
        lo, hi = kv_block_rows(i, qb, kb)
        wait_rows(kv_bufs.at[slot], sems.at[SEM_KV, slot], hi - lo)
        if scale_bufs is not None:
            dma(scale_bufs.at[slot], scale_bufs.at[slot], sems.at[SEM_SCALE, slot]).wait()

    def start_write_back(i, qb, kb, slot):
        """Send the new tokens of q block qb that fall in KV block kb to their pages."""
        lo, hi = kv_block_rows(i, qb, kb)
        w_lo = jnp.maximum(lo, block_span(i, qb)[0])
        state[WB_ROWS + slot] = jnp.maximum(hi - w_lo, 0)

        def write_page(p, carry):
            seg_lo = jnp.maximum(w_lo, p * page_size)
            n = jnp.minimum(hi, (p + 1) * page_size) - seg_lo
            page = page_of(i, seg_lo)
            src = pl.ds(seg_lo - lo, n)
            dst = pl.ds(seg_lo - p * page_size, n)
            dma(kv_bufs.at[slot, src], pages_hbm.at[page, dst], sems.at[SEM_WB, slot]).start()
            return carry

        @pl.when(hi > w_lo)
        def _write():
            lax.fori_loop(w_lo // page_size, pl.cdiv(hi, page_size), write_page, 0)

    def wait_write_back(slot):
        rows = state[WB_ROWS + slot]

        @pl.when(rows > 0)
        def _wait():
            wait_rows(kv_bufs.at[slot], sems.at[SEM_WB, slot], rows)
            state[WB_ROWS + slot] = 0

    def start_send_out(i, qb, slot):
        row, n = q_rows(i, qb)
        state[O_ROWS + slot] = n
        dma(o_bufs.at[slot, pl.ds(0, n)], out_hbm.at[pl.ds(row, n)], sems.at[SEM_O, slot]).start()

    def wait_send_out(slot):
        rows = state[O_ROWS + slot]

        @pl.when(rows > 0)
        def _wait():
            wait_rows(o_bufs.at[slot], sems.at[SEM_O, slot], rows)
            state[O_ROWS + slot] = 0

    # ---- compute ---------------------------------------------------------------------------

    def load_kv(slot, head):
        """K and V of one KV head from a buffer slot in the query dtype, dequantized except
        for int8, whose per-token scales apply to the scores and probabilities instead."""
        dtype = q_bufs.dtype
        if cfg.quant == "int8":
            # The head's K and V rows converted together, then split: Mosaic (libtpu
            # 0.0.42, v6e) aborts converting a single int8 row [bkv, D] of the tile.
            kv = kv_bufs[slot, :, 2 * head : 2 * head + 2, :].astype(jnp.float32).astype(dtype)
            return kv[:, 0, :], kv[:, 1, :]
        k = kv_bufs[slot, :, 2 * head, :]  # [bkv, D]
        v = kv_bufs[slot, :, 2 * head + 1, :]
        if cfg.quant == "f16":
            return f16_bits_to_f32(k).astype(dtype), f16_bits_to_f32(v).astype(dtype)
        if cfg.quant == "fp8":
            k = k.astype(jnp.float32) * tensor_scales_ref[0]
            v = v.astype(jnp.float32) * tensor_scales_ref[1]
        return k.astype(dtype), v.astype(dtype)

    def scale_row(slot, row):
        """int8 scales of head row ``row`` over a buffer slot's block: f32[1, bkv]."""
        return scale_bufs[slot, row : row + 1, :]

    def attend_block(rows, q_slot, kv_slot, first_pos, kb):
        """Fold KV block kb into the running (m, l, acc) of every KV head's query group."""
        num_rows = rows * group
        q_pos = first_pos + lax.broadcasted_iota(jnp.int32, (num_rows, bkv), 0) // group
        k_pos = kb * bkv + lax.broadcasted_iota(jnp.int32, (num_rows, bkv), 1)
        mask = k_pos <= q_pos
        if cfg.sliding_window is not None:
            mask &= k_pos > q_pos - cfg.sliding_window
        for h in range(num_kv_heads):
            q = q_bufs[q_slot, :rows, h * group : (h + 1) * group, :].reshape(num_rows, -1)
            k, v = load_kv(kv_slot, h)
            s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
            if cfg.quant == "int8":
                # q . (k_int * scale) = (q . k_int) * scale: a lane row [1, bkv] per head
                # scales the [rows, bkv] scores rather than every element of K.
                s = s * scale_row(kv_slot, 2 * h)
            s = s * cfg.sm_scale
            if cfg.soft_cap is not None:
                s = cfg.soft_cap * jnp.tanh(s / cfg.soft_cap)
            s = jnp.where(mask, s, MASK_VALUE)
            m_prev = m_ref[h, :num_rows, :1]
            m_next = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
            # A row with nothing visible yet has m_next == MASK_VALUE and p == 1 everywhere;
            # alpha == exp(MASK_VALUE - real max) == 0 wipes that out at its first real key.
            p = jnp.exp(s - m_next)
            alpha = jnp.exp(m_prev - m_next)
            l_next = alpha * l_ref[h, :num_rows, :1] + jnp.sum(p, axis=1, keepdims=True)
            p_v = p * scale_row(kv_slot, 2 * h + 1) if cfg.quant == "int8" else p
            pv = jnp.dot(p_v.astype(v.dtype), v, preferred_element_type=jnp.float32)
            acc_ref[h, :num_rows] = alpha * acc_ref[h, :num_rows] + pv
            m_ref[h, :num_rows] = jnp.broadcast_to(m_next, (num_rows, LANES))
            l_ref[h, :num_rows] = jnp.broadcast_to(l_next, (num_rows, LANES))

    def finish_q_block(rows, o_slot):
        num_rows = rows * group
        for h in range(num_kv_heads):
            out = acc_ref[h, :num_rows] / l_ref[h, :num_rows, :1]
            o_bufs[o_slot, :rows, h * group : (h + 1) * group, :] = out.reshape(
                rows, group, -1
            ).astype(o_bufs.dtype)

    def process(rows):
        """Attend every q block of this grid step's sequence; ``rows`` is the static q block."""

        def q_block(qb, carry):
            q_slot = state[Q_SLOT]
            next_i, next_qb = next_q_ids(seq, qb)

            @pl.when(next_i < num_seqs)
            def _prefetch_q():
                state[Q_SLOT] = 1 - q_slot
                start_fetch_q(next_i, next_qb, 1 - q_slot)

            wait_fetch_q(seq, qb, q_slot)
            num_rows = rows * group
            m_ref[:, :num_rows] = jnp.full((num_kv_heads, num_rows, LANES), -jnp.inf)
            l_ref[:, :num_rows] = jnp.zeros((num_kv_heads, num_rows, LANES), jnp.float32)
            acc_ref[:, :num_rows] = jnp.zeros((num_kv_heads, num_rows, acc_ref.shape[-1]))
            first_pos, _, kb_start, kb_end = block_span(seq, qb)

            def kv_block(kb, carry):
                kv_slot = state[KV_SLOT]
                next_ids = next_kv_ids(seq, qb, kb)

                @pl.when(next_ids[0] < num_seqs)
                def _prefetch_kv():
                    state[KV_SLOT] = 1 - kv_slot
                    start_fetch_kv(*next_ids, 1 - kv_slot)

                wait_fetch_kv(seq, qb, kb, kv_slot)
                start_write_back(seq, qb, kb, kv_slot)
                attend_block(rows, q_slot, kv_slot, first_pos, kb)
                return carry

            lax.fori_loop(kb_start, kb_end, kv_block, None)
            o_slot = state[O_SLOT]
            wait_send_out(o_slot)
            finish_q_block(rows, o_slot)
            start_send_out(seq, qb, o_slot)
            state[O_SLOT] = 1 - o_slot
            return carry

        if rows == 1:
            q_block(0, None)
        else:
            lax.fori_loop(0, num_q_blocks(seq), q_block, None)

    # ---- the grid step -----------------------------------------------------------------------

    @pl.when(seq == 0)
    def _prologue():
        # Stale buffer rows are masked out of the scores, but p @ v would still turn a NaN
        # left in uninitialised VMEM into a NaN output, so every buffer starts at zero.
        for buf in (q_bufs, kv_bufs, scale_bufs):
            if buf is not None:
                buf[...] = jnp.zeros(buf.shape, buf.dtype)
        for j in range(NUM_STATE):
            state[j] = 0
        start_fetch_q(0, 0, 0)
        start_fetch_kv(0, 0, block_span(0, 0)[2], 0)

    decode_end = distribution_ref[0]

    @pl.when(seq < decode_end)
    def _decode():
        process(rows=1)  # one query token: no q block loop, [G, D] x [bkv, D] per KV head

    @pl.when(seq >= decode_end)
    def _prefill_or_mixed():
        process(rows=bq)

    @pl.when(seq == num_seqs - 1)
    def _epilogue():
        for slot in range(2):
            wait_write_back(slot)
            wait_send_out(slot)
