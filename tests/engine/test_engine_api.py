"""The engine's public API from its package, and what LLMEngine refuses to be handed."""

from __future__ import annotations

import subprocess
import sys

import pytest
from engine_helpers import tiny_model

import claimbench.engine
from claimbench.engine import EngineConfig, LLMEngine, SamplingParams, build_engine
from claimbench.engine.build import build_engine as built_here
from claimbench.engine.sampling_params import SamplingParams as own_module_params


def test_the_package_exports_the_engines_entry_points():
    assert build_engine is built_here
    assert own_module_params is SamplingParams
    for name in claimbench.engine.__all__:
        assert getattr(claimbench.engine, name) is not None
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = claimbench.engine.no_such_name


def test_sampling_params_load_without_jax():
    """A server's request parsing builds SamplingParams; its module needs no JAX."""
    code = (
        "import sys\n"
        "from claimbench.engine.sampling_params import SamplingParams\n"
        "SamplingParams(max_tokens=2)\n"
        "assert 'jax' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_early_exit_needs_a_model_with_its_heads():
    """build_engine attaches the exit heads; a model handed in without them is refused."""
    config = EngineConfig(dtype="float32", max_model_len=128, early_exit_threshold=0.5)
    with pytest.raises(ValueError, match="exit heads"):
        LLMEngine(config, tiny_model())
