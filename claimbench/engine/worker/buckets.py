"""Padding buckets: the (token count, sequence count) shapes the step is compiled for.

Token buckets are the config's ``token_buckets`` when it names them, else powers of two from
a floor up to the step budget (which is itself the last bucket); sequence buckets are powers of
two up to max_num_seqs. A handful of executables covers every step. Only pairs with
sequences <= tokens are needed: every scheduled sequence brings at least one token.
"""

from __future__ import annotations

from claimbench.engine.config import MIN_SEQ_BUCKET, MIN_TOKEN_BUCKET, EngineConfig


def power_of_two_buckets(minimum: int, maximum: int) -> tuple[int, ...]:
    """Powers of two from ``minimum`` below ``maximum``, then ``maximum``: (16, 32, ..., max)."""
    if minimum <= 0 or maximum <= 0:
        raise ValueError(f"bucket bounds must be > 0, got {minimum}, {maximum}")
    buckets = []
    size = minimum
    while size < maximum:
        buckets.append(size)
        size *= 2
    buckets.append(maximum)
    return tuple(buckets)


def token_buckets(cfg: EngineConfig) -> tuple[int, ...]:
    return cfg.compilation.token_buckets or power_of_two_buckets(
        MIN_TOKEN_BUCKET, cfg.scheduler.max_num_batched_tokens
    )


def seq_buckets(cfg: EngineConfig) -> tuple[int, ...]:
    return power_of_two_buckets(MIN_SEQ_BUCKET, cfg.scheduler.max_num_seqs)


def bucket_pairs(cfg: EngineConfig) -> list[tuple[int, int]]:
    """Every (token bucket, seq bucket) a step can be padded to."""
    return [(t, s) for t in token_buckets(cfg) for s in seq_buckets(cfg) if s <= t]


def pick_bucket(buckets: tuple[int, ...], n: int) -> int:
    """The smallest bucket >= n; ValueError if n exceeds the largest."""
    for size in buckets:
        if size >= n:
            return size
    raise ValueError(f"{n} exceeds the largest bucket {buckets[-1]}")


def pick_pair(cfg: EngineConfig, num_tokens: int, num_seqs: int) -> tuple[int, int]:
    """The compiled (token bucket, seq bucket) for a step of num_tokens over num_seqs."""
    seqs = pick_bucket(seq_buckets(cfg), num_seqs)
    tokens = pick_bucket(token_buckets(cfg), max(num_tokens, seqs))
    return tokens, seqs
