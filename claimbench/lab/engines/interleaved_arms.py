"""Arms that take turns within every trial, one engine alive at a time.

A timed comparison of settings that each need their own engine (a dtype, a speculative
engine beside a plain one) must not run all of one arm's trials and then the other's: a
drift in the machine's speed over the run (a shared host, thermal state, a neighbour's job)
would then fall on one arm. Here every trial runs every arm, in ABBA order: forward in even
trials, backward in odd ones, so over any two trials each arm holds each position once and a
linear drift adds the same to every arm. The order also makes each trial's last arm the next
trial's first, so its engine is kept across the boundary: ``num_trials + 1`` builds for two
arms, and never two engines alive at once (a 7B model's two 16-bit engines do not fit one
chip together).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext

T = TypeVar("T")


def abba_order(names: list[str], trial: int) -> list[str]:
    """``names`` forward in even trials, backward in odd ones: A B | B A | A B | ..."""
    return list(names) if trial % 2 == 0 else list(reversed(names))


def interleaved_trials(
    ctx: RunContext,
    options: dict[str, dict[str, Any]],
    measure: Callable[[str, LLMEngine, int], T],
    *,
    on_build: Callable[[str, LLMEngine], None] | None = None,
) -> dict[str, list[T]]:
    """Per arm, ``measure(arm, engine, trial)`` for every trial, the arms in ``abba_order``
    within each trial; each arm's engine built by ``ctx.engine(**options[arm])`` when its
    turn comes and the previous arm's freed first. ``on_build(arm, engine)`` runs on every
    new engine before it measures (an unrecorded warm-up, so every timing is of compiled
    steps). Returns each arm's results in trial order."""
    if not options:
        raise ValueError("interleaved_trials needs at least one arm")
    results: dict[str, list[T]] = {arm: [] for arm in options}
    arm_now, engine = None, None
    for trial in range(ctx.trials):
        for arm in abba_order(list(options), trial):
            if arm != arm_now:
                engine = None
                gc.collect()  # the engine's device buffers go now, before the next is built
                engine = ctx.engine(**options[arm])
                arm_now = arm
                if on_build is not None:
                    on_build(arm, engine)
            results[arm].append(measure(arm, engine, trial))
    return results
