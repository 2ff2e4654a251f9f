"""A device whose every step takes a fixed time: a stand-in for a heavier device step.

Within ``slow_device(engine, step_s)`` the engine's runner is the same runner, but each
step's outputs become ready no sooner than ``step_s`` seconds after the device could start
the step (its dispatch, or the step before it becoming ready: the device runs one step at a
time). The host's wait for them (``jax.block_until_ready`` in the engine's step, sync or
async) grows as a slower device would make it grow; nothing the host does changes, so the
host's own work keeps its cost and any overlap of it with the device is kept or lost as the
engine's scheduling decides. Counterfactuals use it to put one arm on a device of a
known step time, or of a known step-time law (a function of the step's inputs).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.engine.worker.batch import StepInputs


class _ReadyAt:
    """A step output's array that is ready no sooner than ``ready_at`` (perf_counter).

    ``jax.block_until_ready`` calls a pytree leaf's own ``block_until_ready``; everything
    that reads the array as numpy goes through ``__array__``."""

    def __init__(self, array: jax.Array, ready_at: float) -> None:
        self.array = array
        self.ready_at = ready_at

    def block_until_ready(self) -> _ReadyAt:
        self.array.block_until_ready()
        time.sleep(max(self.ready_at - time.perf_counter(), 0.0))
        return self

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.array, dtype=dtype)


def _checked_seconds(step_s: Any) -> float:
    if isinstance(step_s, bool) or not isinstance(step_s, int | float) or not 0 < step_s < 10:
        raise ValueError(f"step_s must be a number of seconds in (0, 10), got {step_s!r}")
    return float(step_s)


@contextmanager
def slow_device(engine: LLMEngine, step_s: float | Callable[[StepInputs], float]) -> Iterator[None]:
    """The engine's steps each take ``step_s`` seconds on the device while inside; its runner
    is restored on exit. ``step_s`` may instead be a function of the step's inputs (a device
    whose step time follows the step's work, e.g. its bytes over a bandwidth). ValueError
    unless each step's time is in (0, 10)."""
    seconds_of = step_s if callable(step_s) else None
    fixed = None if seconds_of else _checked_seconds(step_s)
    runner = engine.runner
    real = runner.execute
    last_ready = [0.0]  # the previous step's ready time: the device is busy until then

    def execute(inputs: Any, prompt_logprobs: bool) -> Any:
        seconds = _checked_seconds(seconds_of(inputs)) if seconds_of else fixed
        out = real(inputs, prompt_logprobs)
        ready_at = max(time.perf_counter(), last_ready[0]) + seconds
        last_ready[0] = ready_at
        # experts_touched is read only as numpy (record_step), never fed back to the device.
        return dataclasses.replace(out, experts_touched=_ReadyAt(out.experts_touched, ready_at))

    runner.execute = execute  # an instance attribute: shadows the method until deleted
    try:
        yield
    finally:
        del runner.execute


def device_param(engine: LLMEngine, step_s: Any) -> AbstractContextManager[None]:
    """An experiment's ``device_step_s`` param: 0 runs on the real device (a null context),
    else every step, the service-rate meter's included, takes ``step_s`` seconds on a device
    of a fixed step time. ValueError unless it is a number of seconds in [0, 10)."""
    if isinstance(step_s, bool) or not isinstance(step_s, int | float) or not 0 <= step_s < 10:
        raise ValueError(f"param device_step_s must be seconds in [0, 10), got {step_s!r}")
    return slow_device(engine, step_s) if step_s else nullcontext()
