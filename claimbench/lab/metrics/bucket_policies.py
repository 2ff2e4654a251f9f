"""Bucket policies over a served step trace: the padding and compiled programs each costs.

The engine runs a step of n scheduled tokens over s sequences at a compiled (token bucket,
sequence bucket) pair: the smallest sequence bucket >= s, then the smallest token bucket >=
max(n, that sequence bucket) (engine/buckets.pick_pair), and compiles one program per pair with
sequence bucket <= token bucket (buckets.bucket_pairs). A policy here is a set of token
buckets beside the engine's sequence buckets, so its padding on a trace of (n, s) steps and its
program count are the engine's own rules applied to other buckets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BucketPolicy:
    """Token buckets (ascending, the last one the step budget) and the sequence buckets."""

    name: str
    token_buckets: tuple[int, ...]
    seq_buckets: tuple[int, ...]

    def __post_init__(self) -> None:
        for label, sizes in (("token", self.token_buckets), ("seq", self.seq_buckets)):
            if not sizes or list(sizes) != sorted(set(sizes)) or sizes[0] < 1:
                raise ValueError(f"{self.name}: {label} buckets must ascend from >= 1, got {sizes}")

    @property
    def num_programs(self) -> int:
        """Compiled step programs: (token, seq) pairs with seq <= token (bucket_pairs' rule)."""
        return sum(1 for t in self.token_buckets for s in self.seq_buckets if s <= t)

    def needed_tokens(self, num_tokens: np.ndarray, num_seqs: np.ndarray) -> np.ndarray:
        """i64[steps]: the token count each step must fit, max(n, its sequence bucket)."""
        seqs = _pick(self.seq_buckets, np.asarray(num_seqs), "sequences")
        return np.maximum(np.asarray(num_tokens, np.int64), seqs)

    def padded_tokens(self, num_tokens: np.ndarray, num_seqs: np.ndarray) -> np.ndarray:
        """i64[steps]: the token bucket each step of (num_tokens, num_seqs) runs at."""
        return _pick(self.token_buckets, self.needed_tokens(num_tokens, num_seqs), "tokens")

    def padding_pct(self, num_tokens: np.ndarray, num_seqs: np.ndarray) -> float:
        """Padding as a percentage of the computed (padded) tokens over the whole trace."""
        padded = self.padded_tokens(num_tokens, num_seqs)
        return 100.0 * float(padded.sum() - np.sum(num_tokens)) / float(padded.sum())


def _pick(buckets: tuple[int, ...], needed: np.ndarray, what: str) -> np.ndarray:
    """The smallest bucket >= each needed size; ValueError when one exceeds the largest."""
    needed = np.asarray(needed, np.int64)
    if needed.size and needed.max() > buckets[-1]:
        raise ValueError(
            f"a step of {needed.max()} {what} exceeds the largest bucket {buckets[-1]}"
        )
    return np.asarray(buckets, np.int64)[np.searchsorted(buckets, needed, side="left")]


def geometric_buckets(minimum: int, maximum: int, ratio: float) -> tuple[int, ...]:
    """minimum * ratio^k rounded up, below ``maximum``, then ``maximum``; ratio 2 gives the
    engine's powers of two (buckets.power_of_two_buckets)."""
    if not (minimum >= 1 and maximum >= minimum and ratio > 1):
        raise ValueError(
            f"need 1 <= minimum <= maximum and ratio > 1, got {minimum}, {maximum}, {ratio}"
        )
    sizes, size = [], float(minimum)
    while math.ceil(size) < maximum:
        if not sizes or math.ceil(size) > sizes[-1]:
            sizes.append(math.ceil(size))
        size *= ratio
    return (*sizes, maximum)


def fit_histogram_buckets(needed: np.ndarray, num_buckets: int, maximum: int) -> tuple[int, ...]:
    """The ``num_buckets`` token buckets, the largest being ``maximum`` (so every step fits),
    that minimise the padded tokens summed over the steps' ``needed`` sizes (i64[steps]).

    Exact dynamic programme over the distinct sizes: an optimal bucket always sits on a needed
    size (lowering it to the largest size it covers pads less), so with the sizes sorted,
    best[b][j] is the least padded total of sizes <= v_j with b buckets, the top one at v_j.
    """
    needed = np.asarray(needed, np.int64)
    if num_buckets < 1 or needed.size == 0 or needed.max() > maximum:
        raise ValueError(
            f"need num_buckets >= 1 and 1..{maximum} needed sizes, got {num_buckets} buckets "
            f"and sizes up to {needed.max() if needed.size else None}"
        )
    values, counts = np.unique(needed, return_counts=True)
    cum = np.concatenate([[0], np.cumsum(counts)])  # cum[j + 1] = steps with size <= v_j
    m = len(values)
    best = values * cum[1:]  # one bucket, at v_j, covers every size <= v_j
    choice = [np.full(m, -1)]
    layers = [best]
    for _ in range(1, num_buckets - 1):
        prev = layers[-1]
        nxt, arg = best.copy(), np.full(m, -1)
        for j in range(1, m):
            # Buckets at v_i (i < j) and at v_j, which covers the sizes in (v_i, v_j].
            costs = prev[:j] + values[j] * (cum[j + 1] - cum[1 : j + 1])
            i = int(np.argmin(costs))
            if costs[i] < nxt[j]:
                nxt[j], arg[j] = costs[i], i
        layers.append(nxt)
        choice.append(arg)
    # The top bucket, maximum, covers every size above the last chosen one.
    total = maximum * cum[-1]
    end: tuple[int, int] | None = None
    if num_buckets > 1:
        for b, layer in enumerate(layers):
            costs = layer + maximum * (cum[-1] - cum[1:])
            j = int(np.argmin(costs))
            if costs[j] < total:
                total, end = costs[j], (b, j)
    chosen = []
    while end is not None:
        b, j = end
        chosen.append(int(values[j]))
        i = int(choice[b][j])
        end = (b - 1, i) if i >= 0 else None
    return (*sorted(set(chosen) - {maximum}), maximum)
