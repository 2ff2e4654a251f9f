"""Golden-output health: is the server producing the output it produced at start-up?

A process can answer 200 while serving garbage (weights corrupted in memory, a bad
kernel, a wrong config), so readiness generates a short greedy completion of a fixed
prompt and compares its tokens with those recorded when the server started. Greedy
decoding in float32 is deterministic whatever shares the batch; in bfloat16 a near-tie
can flip with the batch's composition (engine.py), so one mismatch is retried once in a
different batch before the check fails: a broken model fails every try.

The check runs under its own fresh cache salt, so the prompt's KV is recomputed by the
current weights instead of being served from a prefix cached before they changed.
It runs at the lowest tier (a probe never takes a paying tenant's turn), under a timeout
(a hung engine fails it instead of hanging it), and one at a time with its result kept for
``READY_CACHE_S`` (``Readiness``): 32 unauthenticated loops on /health/ready once ran 837
golden generations at the top tier and slowed a tenant's stream from 4.8 s to 18.1 s.
``reference_tokens`` is the offline form (``claimbench doctor``): the engine's paged path
against a plain dense forward pass of the same weights.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from claimbench.engine.engine import LLMEngine
from claimbench.engine.outputs import Event, FinishEvent, RejectEvent, TokenEvent
from claimbench.engine.sampling_params import SamplingParams
from claimbench.models.llama import LlamaForCausalLM

GOLDEN_PROMPT = "def fibonacci(n):\n    "
GOLDEN_TOKENS = 8
HEALTH_TENANT = "_health"  # its own tenant: the probe never spends a client's limits
HEALTH_PRIORITY = 2**31 - 1  # the lowest tier there is (a larger number is a lower tier)
ATTEMPTS = 2
READY_CACHE_S = 5.0  # a readiness answer is reused this long
READY_TIMEOUT_S = 10.0  # a check not done by then fails (the engine is hung or swamped)

_nonce = itertools.count()


class ProbeStream(Protocol):
    """What the probe reads of a request's events (engine_loop/request_stream.py)."""

    request_id: str

    async def next(self) -> Event: ...


class ProbedEngine(Protocol):
    """What the probe uses of a serving engine (a process or a thread one, engine_loop/)."""

    async def add(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        tenant: str,
        priority: int = 0,
        cache_salt: str | None = None,
    ) -> ProbeStream: ...

    def abort(self, request_id: str, reason: str = "abort") -> None: ...


def golden_sampling() -> SamplingParams:
    return SamplingParams(max_tokens=GOLDEN_TOKENS, temperature=0.0, ignore_eos=True)


@dataclass(frozen=True)
class GoldenResult:
    ok: bool
    expected: list[int]
    got: list[int]
    timeout_s: float | None = None  # set when the check did not finish in time

    @property
    def detail(self) -> str:
        if self.timeout_s is not None:
            return f"golden completion did not finish within {self.timeout_s:g} s"
        if self.ok:
            return f"golden completion matches ({len(self.expected)} tokens)"
        same = next(
            (i for i, (a, b) in enumerate(zip(self.expected, self.got, strict=False)) if a != b),
            min(len(self.expected), len(self.got)),
        )
        return (
            f"golden completion differs from start-up from token {same}: "
            f"expected {self.expected}, got {self.got}"
        )


def record_golden(engine: LLMEngine, prompt_ids: Sequence[int]) -> list[int]:
    """The golden tokens, generated before the engine loop starts (synchronously)."""
    return engine.generate([list(prompt_ids)], golden_sampling())[0].token_ids


async def check_golden(
    engine: ProbedEngine, prompt_ids: Sequence[int], expected: list[int]
) -> GoldenResult:
    """Generate the golden completion now and compare (EngineStopped if the loop is down)."""
    got: list[int] = []
    for _ in range(ATTEMPTS):
        got = await _generate(engine, prompt_ids)
        if got == expected:
            return GoldenResult(True, expected, got)
    return GoldenResult(False, expected, got)


async def _generate(engine: ProbedEngine, prompt_ids: Sequence[int]) -> list[int]:
    stream = await engine.add(
        prompt_ids,
        golden_sampling(),
        tenant=HEALTH_TENANT,
        priority=HEALTH_PRIORITY,
        cache_salt=f"health-probe-{next(_nonce)}",
    )
    tokens: list[int] = []
    done = False
    try:
        while True:
            event = await stream.next()
            if isinstance(event, TokenEvent):
                tokens.append(event.token_id)
            elif isinstance(event, FinishEvent | RejectEvent):
                done = True
                return tokens
    finally:
        if not done:  # timed out (cancelled): its pages go back now
            engine.abort(stream.request_id)


class Readiness:
    """/health/ready's check: one at a time, its answer reused for ``cache_s``, failed
    past ``timeout_s``. EngineStopped propagates (and is not kept)."""

    def __init__(self, cache_s: float = READY_CACHE_S, timeout_s: float = READY_TIMEOUT_S) -> None:
        self.cache_s = cache_s
        self.timeout_s = timeout_s
        self.num_checks = 0  # golden checks run (not answers given)
        self._lock = asyncio.Lock()
        self._result: GoldenResult | None = None
        self._time = -math.inf

    def forget(self) -> None:
        """Drop the kept answer (the engine was replaced)."""
        self._result, self._time = None, -math.inf

    async def check(
        self, engine: ProbedEngine, prompt_ids: Sequence[int], expected: list[int]
    ) -> GoldenResult:
        async with self._lock:  # callers arriving during a check get its answer
            if self._result is not None and time.monotonic() - self._time < self.cache_s:
                return self._result
            self.num_checks += 1
            try:
                result = await asyncio.wait_for(
                    check_golden(engine, prompt_ids, expected), self.timeout_s
                )
            except TimeoutError:
                result = GoldenResult(False, expected, [], timeout_s=self.timeout_s)
            self._result, self._time = result, time.monotonic()
            return result


def reference_tokens(model: LlamaForCausalLM, prompt_ids: Sequence[int], num: int) -> list[int]:
    """Greedy continuation by a dense forward pass over the whole sequence each token (no
    KV cache, no paging, no batching): what the engine's tokens must equal.

    The sequence is padded at the end to its final length, so one executable serves every
    token (causal attention never looks at the padding after a position)."""
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda ids: nnx.merge(graphdef, state).forward_dense(ids))
    length = len(prompt_ids) + num
    ids = np.zeros((1, length), np.int32)
    ids[0, : len(prompt_ids)] = prompt_ids
    for position in range(len(prompt_ids), length):
        logits = forward(jnp.asarray(ids))
        ids[0, position] = int(np.argmax(np.asarray(logits[0, position - 1], np.float32)))
    return ids[0, len(prompt_ids) :].tolist()
