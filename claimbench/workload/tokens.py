"""Token sources: where a workload's prompt tokens come from.

A token source is a callable ``(rng, length) -> list[int]`` returning ``length`` token
ids drawn with ``rng`` only, so the same generator state always gives the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from claimbench.workload.validation import check_int

TokenSource = Callable[[np.random.Generator, int], Sequence[int]]


def corpus_token_source(token_ids: np.ndarray) -> TokenSource:
    """Windows of ``length`` consecutive ids from ``token_ids`` (i[num_tokens], e.g. a
    tokenized held-out corpus), each starting at a uniformly drawn offset.

    Real text rather than random ids keeps the model's attention patterns and, for
    speculative decoding, its acceptance rates representative.
    """
    ids = np.asarray(token_ids)
    if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"corpus_token_source needs a non-empty 1-D integer array, got dtype {ids.dtype} "
            f"shape {ids.shape}"
        )
    ids = ids.copy()  # the source must not change if the caller later edits its array

    def source(rng: np.random.Generator, length: int) -> list[int]:
        length = check_int("corpus_token_source", "length", length, minimum=0)
        if length > ids.size:
            raise ValueError(f"a {length}-token prompt is longer than the {ids.size}-token corpus")
        start = int(rng.integers(0, ids.size - length + 1))
        return ids[start : start + length].tolist()

    return source


def random_token_source(vocab_size: int) -> TokenSource:
    """Ids drawn uniformly from [0, vocab_size): cheap prompts for tests."""
    vocab_size = check_int("random_token_source", "vocab_size", vocab_size, minimum=1)

    def source(rng: np.random.Generator, length: int) -> list[int]:
        length = check_int("random_token_source", "length", length, minimum=0)
        return rng.integers(0, vocab_size, size=length).tolist()

    return source
