"""SamplingParams: how one request's tokens are chosen and when it stops (the engine's input).

Checked once, here, at the boundary: a server passes user JSON straight in.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

MIN_TEMPERATURE = 1e-5  # below this a request is greedy
# The step's arrays hold top_k, token counts and stop ids as int32 and seeds as uint32: a
# value past them would overflow the batch every request of the step shares.
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class SamplingParams:
    """How one request's tokens are chosen and when it stops."""

    max_tokens: int = 16  # output tokens at most
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # keep the k most likely tokens; 0 = all
    top_p: float = 1.0  # keep the smallest set with this much probability
    seed: int | None = None  # None = derived from the engine seed and the request
    stop_token_ids: tuple[int, ...] = ()  # stop after emitting any of these
    ignore_eos: bool = False  # keep going past the model's end-of-sequence token
    logprobs: bool = False  # return the log-prob of each sampled token
    prompt_logprobs: bool = False  # return log p(prompt[i] | prompt[:i]) for i >= 1

    def __post_init__(self) -> None:
        # Types first: a server passes user JSON straight in, and 2.5 or True must not be
        # coerced into a token count, nor NaN into a temperature (it samples token 0 forever).
        for name in ("max_tokens", "top_k"):
            _require_int(name, getattr(self, name))
        if self.seed is not None:
            _require_int("seed", self.seed)
        for name in ("temperature", "top_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"{name} must be a number, got {value!r}")
            if not math.isfinite(_as_float(value)):
                raise ValueError(f"{name} must be finite, got {value!r}")
        for name in ("ignore_eos", "logprobs", "prompt_logprobs"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if isinstance(self.stop_token_ids, str | bytes) or not hasattr(
            self.stop_token_ids, "__iter__"
        ):
            raise ValueError(f"stop_token_ids must be a list of ints, got {self.stop_token_ids!r}")
        # Taken once: a generator would be used up by the checks and leave nothing to store.
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        for token in self.stop_token_ids:
            _require_int("stop_token_ids[i]", token)
            if not 0 <= token <= INT32_MAX:
                raise ValueError(f"stop_token_ids must be in [0, {INT32_MAX}], got {token}")
        if not 1 <= self.max_tokens <= INT32_MAX:
            raise ValueError(f"max_tokens must be in [1, {INT32_MAX}], got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 <= self.top_k <= INT32_MAX:
            # Above the vocabulary is "every token" (the sampler's rule); above int32, an error.
            raise ValueError(f"top_k must be in [0, {INT32_MAX}] (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.seed is not None and not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must be in [0, 2**32), got {self.seed}")
        # Stored as Python numbers: a numpy integer (np.int16(32767)) passes the range checks
        # but wraps in the scheduler's sums (prompt + max_tokens) and breaks every later step.
        for name in ("max_tokens", "top_k"):
            object.__setattr__(self, name, int(getattr(self, name)))
        for name in ("temperature", "top_p"):
            object.__setattr__(self, name, _as_float(getattr(self, name)))
        if self.seed is not None:
            object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

    @property
    def greedy(self) -> bool:
        return self.temperature < MIN_TEMPERATURE


def _as_float(value: numbers.Real) -> float:
    """``value`` as a float; an integer past float range is infinite (float() would raise)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _require_int(name: str, value: object) -> None:
    """ValueError unless ``value`` is an integer (bool and integral floats included out)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
