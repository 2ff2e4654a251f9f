"""Speculative decoding's n-gram proposer (host).

A proposer guesses up to k tokens to follow a sequence; the target model scores all of them
in one step (a verify chunk of 1 + k tokens) and ``worker.acceptance.accept`` keeps the
longest prefix the target agrees with, plus one token of its own. The draft-model proposer
is draft_runner.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

PROMPT_LOOKUP_MIN = 1  # shortest suffix n-gram the n-gram proposer matches
PROMPT_LOOKUP_MAX = 4  # longest


def propose_ngram(
    token_ids: Sequence[int],
    k: int,
    min_n: int = PROMPT_LOOKUP_MIN,
    max_n: int = PROMPT_LOOKUP_MAX,
) -> list[int]:
    """Prompt lookup (vLLM's n-gram proposer): find the longest suffix of ``token_ids`` of
    length n in [min_n, max_n] that also occurs earlier, and propose the (up to) k tokens that
    followed its most recent earlier occurrence. [] when nothing matches."""
    tokens = np.asarray(token_ids, np.int64)
    num = len(tokens)
    for n in range(min(max_n, num - 1), min_n - 1, -1):
        # Windows that end before the last token: the suffix itself is not an occurrence.
        windows = np.lib.stride_tricks.sliding_window_view(tokens[: num - 1], n)
        starts = np.flatnonzero(np.all(windows == tokens[num - n :], axis=1))
        if starts.size:
            # The most recent occurrence: the freshest context predicts best.
            follow = int(starts[-1]) + n
            return tokens[follow : follow + k].tolist()
    return []
