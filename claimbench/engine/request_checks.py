"""What ``LLMEngine.add_request`` and the calls naming a request accept: each malformed
argument is a ValueError naming it, raised before anything is registered or charged."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np

from claimbench.engine.sampling_params import SamplingParams
from claimbench.models.tokenizer import Tokenizer


def check_request(
    prompt: object,
    sampling: object,
    tenant: object,
    priority: object,
    cache_salt: object,
    tokenizer: Tokenizer | None,
) -> list[int]:
    """The prompt's token ids (text is encoded by ``tokenizer``); ValueError naming the first
    malformed argument."""
    if not isinstance(sampling, SamplingParams):
        raise ValueError(f"sampling must be SamplingParams, got {type(sampling).__name__}")
    if not isinstance(tenant, str) or not tenant:
        raise ValueError(f"tenant must be a non-empty string, got {tenant!r}")
    if isinstance(priority, bool) or not isinstance(priority, numbers.Integral):
        raise ValueError(f"priority must be an integer tier, got {priority!r}")
    if not -(2**31) <= priority < 2**31:
        # Orderings do arithmetic on it (priority-aging: arrival + priority * aging_s).
        raise ValueError(f"priority must fit an int32, got {priority}")
    if cache_salt is not None and not isinstance(cache_salt, str):
        raise ValueError(f"cache_salt must be a string or None, got {cache_salt!r}")
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError("a text prompt needs a tokenizer; pass token ids instead")
        return tokenizer.encode(prompt)
    if isinstance(prompt, bytes | bytearray | dict) or not isinstance(prompt, Sequence):
        raise ValueError(f"prompt must be text or a list of token ids, got {type(prompt)}")
    bad = [t for t in prompt if isinstance(t, bool) or not isinstance(t, int | np.integer)]
    if bad:
        raise ValueError(f"prompt token ids must be integers, got {bad[:5]}")
    return [int(t) for t in prompt]


def invalid_tokens(token_ids: list[int], vocab: int) -> str | None:
    """Why ``token_ids`` cannot be served by a model of ``vocab`` tokens, or None."""
    bad = [t for t in token_ids if not 0 <= t < vocab]
    return f"token ids {bad[:5]} outside the vocabulary of {vocab}" if bad else None


def check_id(request_id: object) -> str:
    """``request_id`` if it is a string (ids are "req-N"); ValueError naming it otherwise."""
    if not isinstance(request_id, str):
        raise ValueError(f"request id must be a string, got {request_id!r}")
    return request_id


def check_arrival_time(arrival_time: object) -> float | None:
    """A finite number of perf_counter seconds, or None (now). The orderings sort by it and
    the token buckets refill by it: a string would make every step's sort raise, and NaN
    would compare false everywhere (a bucket at NaN refuses nothing)."""
    if arrival_time is None:
        return None
    if isinstance(arrival_time, bool) or not isinstance(arrival_time, numbers.Real):
        raise ValueError(f"arrival_time must be a number of seconds, got {arrival_time!r}")
    try:
        seconds = float(arrival_time)
    except OverflowError:
        seconds = math.inf  # an integer past float range
    if not math.isfinite(seconds):
        raise ValueError(f"arrival_time must be finite, got {arrival_time!r}")
    return seconds
