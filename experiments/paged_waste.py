"""paged-waste: KV waste and concurrency of a paged pool vs max-length contiguous reservation.

The length mix is chat-like: lognormal prompt and output lengths whose means default to
ShareGPT's as the vLLM paper reports them (161 prompt and 338 output tokens), sigma 1.0, the
output capped to the room max_model_len leaves after the prompt (as a server caps max_tokens).

Both layouts fill the same pool (``pool_tokens`` token slots) through the engine's own
BlockManager, admitting sequences in draw order until an allocation fails:

* paged: pages of ``page_size`` tokens; each sequence holds the pages of its final length
  (prompt + every output token), the most it ever holds, so the paged count is a floor;
* contiguous: each sequence reserves ``max_model_len`` slots up front, i.e. one page of
  max_model_len tokens.

Waste is allocated-but-unused slots / allocated slots over the admitted sequences; the
concurrency ratio is paged sequences / contiguous sequences. Each trial draws fresh lengths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from claimbench.engine.block_manager import BlockManager
from claimbench.engine.request import Request
from claimbench.engine.sampler import SamplingParams
from claimbench.workload.lengths import LognormalLength

if TYPE_CHECKING:
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "prompt_mean": 161.0,
    "prompt_sigma": 1.0,
    "output_mean": 338.0,
    "output_sigma": 1.0,
    "max_model_len": 2048,
    "page_size": 16,
    "pool_tokens": 131072,
}


def draw_lengths(
    params: dict[str, Any], rng: np.random.Generator, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """(prompt i64[n], output i64[n]) from the mix; prompt + output <= max_model_len."""
    max_len = params["max_model_len"]
    prompt = LognormalLength(
        mean=params["prompt_mean"], sigma=params["prompt_sigma"], lo=1, hi=max_len - 1
    ).sample(rng, n)
    output = LognormalLength(
        mean=params["output_mean"], sigma=params["output_sigma"], lo=1, hi=max_len - 1
    ).sample(rng, n)
    return prompt, np.minimum(output, max_len - prompt)


def fill_pool(
    lengths: np.ndarray, *, page_size: int, pool_tokens: int, reserve_tokens: int | None = None
) -> tuple[int, int, int]:
    """Admit sequences of ``lengths`` (i64[n] tokens each) into a pool of pool_tokens slots
    until one does not fit; each reserves ``reserve_tokens`` (default: its own length).

    Returns (sequences admitted, slots allocated, slots holding a token).
    """
    # +1: the block manager keeps page 0 as the null page, outside the pool's slots.
    manager = BlockManager(pool_tokens // page_size + 1, page_size)
    num_tokens = 0
    for i, length in enumerate(lengths.tolist()):
        reserve = length if reserve_tokens is None else reserve_tokens
        request = Request(
            f"seq{i}",
            i,
            [0] * length,
            SamplingParams(max_tokens=1),
            seed=0,
            tenant="default",
            priority=0,
            arrival_time=float(i),
        )
        if not manager.can_allocate(request, reserve):
            return i, manager.num_used_pages * page_size, num_tokens
        manager.allocate(request, reserve)
        num_tokens += length
    raise ValueError(f"{len(lengths)} sequences never filled a pool of {pool_tokens} slots")


def measure(params: dict[str, Any], rng: np.random.Generator) -> dict[str, float]:
    """One trial: both layouts over the same draw of sequences."""
    page_size, max_len, pool = params["page_size"], params["max_model_len"], params["pool_tokens"]
    # Enough sequences that even the shortest possible ones (1 token each) overfill the pool.
    prompt, output = draw_lengths(params, rng, pool + 1)
    lengths = prompt + output
    paged_seqs, paged_alloc, paged_used = fill_pool(lengths, page_size=page_size, pool_tokens=pool)
    contig_seqs, contig_alloc, contig_used = fill_pool(
        lengths, page_size=max_len, pool_tokens=pool, reserve_tokens=max_len
    )
    if contig_seqs == 0:
        raise ValueError(f"pool_tokens={pool} holds no max_model_len={max_len} reservation")
    return {
        "paged_waste_pct": 100.0 * (paged_alloc - paged_used) / paged_alloc,
        "contiguous_waste_pct": 100.0 * (contig_alloc - contig_used) / contig_alloc,
        "concurrency_ratio": paged_seqs / contig_seqs,
        "paged_sequences": paged_seqs,
        "contiguous_sequences": contig_seqs,
        "mean_sequence_tokens": float(lengths[:paged_seqs].mean()),
    }


UNITS = {
    "paged_waste_pct": "%",
    "contiguous_waste_pct": "%",
    "concurrency_ratio": "x",
    "paged_sequences": "sequences",
    "contiguous_sequences": "sequences",
    "mean_sequence_tokens": "tokens",
}


def _params(ctx: RunContext) -> dict[str, Any]:
    params = DEFAULT_PARAMS | {k: v for k, v in ctx.params.items() if k in DEFAULT_PARAMS}
    for key in ("max_model_len", "page_size", "pool_tokens"):
        if not isinstance(params[key], int) or params[key] < 1:
            raise ValueError(f"param {key} must be a positive integer, got {params[key]!r}")
    if params["max_model_len"] < 2:
        raise ValueError(f"param max_model_len must be >= 2, got {params['max_model_len']}")
    return params


def run(ctx: RunContext) -> None:
    """Record paged_waste_pct, contiguous_waste_pct and concurrency_ratio per trial."""
    params = _params(ctx)
    for trial in range(ctx.trials):
        rng = np.random.default_rng([ctx.seed, trial])
        for metric, value in measure(params, rng).items():
            ctx.record(metric, value, trial=trial, unit=UNITS[metric])
