"""The serving engine: ``LLMEngine.step()`` = schedule -> execute -> update from the outputs.

config.py, engine.py and build.py hold the engine itself; its parts live in subpackages:
sched/ (which requests run, and what their outputs do to them), kv/ (where their KV lives),
worker/ (the device step) and spec/ (speculative decoding).

The public API is importable from here (``from claimbench.engine import build_engine,
EngineConfig, SamplingParams``). Each name is loaded on first use, as vLLM's package does, so
importing a light submodule (config.py, sampling_params.py) does not load the engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from claimbench.engine.build import build_engine
    from claimbench.engine.config import EngineConfig
    from claimbench.engine.engine import LLMEngine
    from claimbench.engine.outputs import (
        Event,
        FinishEvent,
        RejectEvent,
        RejectKind,
        RequestOutput,
        TokenEvent,
    )
    from claimbench.engine.sampling_params import SamplingParams
    from claimbench.engine.stats import EngineStats

# Public name -> the module that defines it.
_PUBLIC = {
    "build_engine": "claimbench.engine.build",
    "EngineConfig": "claimbench.engine.config",
    "LLMEngine": "claimbench.engine.engine",
    "SamplingParams": "claimbench.engine.sampling_params",
    "RequestOutput": "claimbench.engine.outputs",
    "Event": "claimbench.engine.outputs",
    "TokenEvent": "claimbench.engine.outputs",
    "FinishEvent": "claimbench.engine.outputs",
    "RejectEvent": "claimbench.engine.outputs",
    "RejectKind": "claimbench.engine.outputs",
    "EngineStats": "claimbench.engine.stats",
}

__all__ = [
    "Event",
    "EngineConfig",
    "EngineStats",
    "FinishEvent",
    "LLMEngine",
    "RejectEvent",
    "RejectKind",
    "RequestOutput",
    "SamplingParams",
    "TokenEvent",
    "build_engine",
]


def __getattr__(name: str) -> object:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
