"""`serve` and `bench` take their engine options' defaults from EngineConfig's sections."""

from __future__ import annotations

import inspect

import pytest

from claimbench.cli.serving.bench_cmd import bench
from claimbench.cli.serving.engine_options import ENGINE_DEFAULTS, KVDtype, WeightFormat
from claimbench.cli.serving.serve_cmd import serve
from claimbench.engine.config import KV_DTYPES, WEIGHT_FORMATS, CacheConfig, SchedulerConfig


@pytest.mark.parametrize("command", [serve, bench])
def test_engine_options_default_to_the_sections_defaults(command):
    params = inspect.signature(command).parameters
    for name in ("max_num_seqs", "max_num_batched_tokens", "batch_invariant", "weights"):
        assert params[name].default == ENGINE_DEFAULTS[name]
    assert params["kv_pool_mb"].default * 2**20 == CacheConfig.kv_pool_bytes
    assert params["max_num_seqs"].default == SchedulerConfig.max_num_seqs
    assert params["kv_dtype"].default == CacheConfig.kv_dtype


def test_serve_defaults_its_scheduler_options_to_the_configs():
    params = inspect.signature(serve).parameters
    for name in ("max_model_len", "scheduling_policy", "victim_policy", "async_scheduling"):
        assert params[name].default == ENGINE_DEFAULTS[name]


def test_bench_defaults_its_quantization_and_spec_options_to_the_configs():
    params = inspect.signature(bench).parameters
    assert float(params["kv_scale"].default) == ENGINE_DEFAULTS["kv_scale"]
    for name in ("num_spec_tokens", "tp"):
        assert params[name].default == ENGINE_DEFAULTS[name]


def test_the_choices_are_the_configs():
    assert tuple(KVDtype) == KV_DTYPES and tuple(WeightFormat) == WEIGHT_FORMATS
