"""Golden-output health: is the server producing the output it produced at start-up?

A process can answer 200 while serving garbage (weights corrupted in memory, a bad
kernel, a wrong config), so readiness generates a short greedy completion of a fixed
prompt and compares its tokens with those recorded when the server started. Greedy
decoding in float32 is deterministic whatever shares the batch; in bfloat16 a near-tie
can flip with the batch's composition (engine.py), so one mismatch is retried once in a
different batch before the check fails: a broken model fails every try.

The check runs under its own fresh cache salt, so the prompt's KV is recomputed by the
current weights instead of being served from a prefix cached before they changed.
``reference_tokens`` is the offline form (``claimbench doctor``): the engine's paged path
against a plain dense forward pass of the same weights.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from claimbench.engine.engine import LLMEngine
from claimbench.engine.outputs import FinishEvent, RejectEvent, TokenEvent
from claimbench.engine.sampler import SamplingParams
from claimbench.models.llama import LlamaForCausalLM
from claimbench.serving.async_engine import AsyncEngine

GOLDEN_PROMPT = "def fibonacci(n):\n    "
GOLDEN_TOKENS = 8
HEALTH_TENANT = "_health"  # its own tenant: the probe never spends a client's limits
ATTEMPTS = 2

_nonce = itertools.count()


def golden_sampling() -> SamplingParams:
    return SamplingParams(max_tokens=GOLDEN_TOKENS, temperature=0.0, ignore_eos=True)


@dataclass(frozen=True)
class GoldenResult:
    ok: bool
    expected: list[int]
    got: list[int]

    @property
    def detail(self) -> str:
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
    engine: AsyncEngine, prompt_ids: Sequence[int], expected: list[int]
) -> GoldenResult:
    """Generate the golden completion now and compare (EngineStopped if the loop is down)."""
    got: list[int] = []
    for _ in range(ATTEMPTS):
        got = await _generate(engine, prompt_ids)
        if got == expected:
            return GoldenResult(True, expected, got)
    return GoldenResult(False, expected, got)


async def _generate(engine: AsyncEngine, prompt_ids: Sequence[int]) -> list[int]:
    stream = await engine.add(
        prompt_ids,
        golden_sampling(),
        tenant=HEALTH_TENANT,
        cache_salt=f"health-probe-{next(_nonce)}",
    )
    tokens: list[int] = []
    while True:
        event = await stream.next()
        if isinstance(event, TokenEvent):
            tokens.append(event.token_id)
        elif isinstance(event, FinishEvent | RejectEvent):
            return tokens


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
