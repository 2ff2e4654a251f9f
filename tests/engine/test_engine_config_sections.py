"""EngineConfig as six small configs, read through its sections, built from flat option names."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from pathlib import Path

import pytest
import yaml

from claimbench.engine.config import (
    SCHEDULING_POLICIES,
    SECTION_OF,
    SECTIONS,
    VICTIM_POLICIES,
    CacheConfig,
    EngineConfig,
    SchedulerConfig,
)
from claimbench.engine.sched.policies import ORDERINGS, VICTIMS

REPO = Path(__file__).resolve().parents[2]


def test_flat_options_land_in_their_sections_and_read_back():
    config = EngineConfig(page_size=32, max_num_seqs=8, speculative="ngram", tp=2)
    assert config.cache.page_size == 32
    assert config.scheduler.max_num_seqs == 8
    assert config.spec.speculative == "ngram" and config.parallel.tp == 2
    assert config.flat()["page_size"] == 32
    assert config == EngineConfig(**config.flat())


def test_replace_takes_flat_names_and_keeps_the_rest():
    config = EngineConfig(page_size=32, max_num_seqs=8)
    changed = dataclasses.replace(config, page_size=64)
    assert (changed.cache.page_size, changed.scheduler.max_num_seqs) == (64, 8)
    assert changed.scheduler is config.scheduler  # an untouched section is shared


def test_a_whole_section_with_flat_options_beside_it():
    cache = CacheConfig(page_size=8, kv_dtype="int8")
    config = EngineConfig(cache=cache, page_size=32)
    assert (config.cache.page_size, config.cache.kv_dtype) == (32, "int8")  # the flat option wins
    with pytest.raises(TypeError, match="SchedulerConfig"):
        EngineConfig(scheduler=cache)


def test_bad_options_are_one_line_errors():
    with pytest.raises(TypeError, match="unexpected option"):
        EngineConfig(pages=3)
    with pytest.raises(ValueError, match="page_size must be > 0"):
        EngineConfig(page_size=0)
    # A rule across sections: the largest token bucket is the scheduler's budget.
    with pytest.raises(ValueError, match="ascend to max_num_batched_tokens"):
        EngineConfig(token_buckets=(16, 32), max_num_batched_tokens=64)
    with pytest.raises(ValueError, match="needs tp=1"):
        EngineConfig(early_exit_threshold=0.5, speculative="ngram")


def test_an_engine_config_survives_pickle_and_copy():
    # The server sends its config to the engine process by pickle.
    config = EngineConfig(page_size=32, tenants=(), ladder=())
    assert pickle.loads(pickle.dumps(config)) == config
    assert copy.deepcopy(config) == config
    assert hash(copy.deepcopy(config)) == hash(config)
    with pytest.raises(AttributeError):
        _ = config.not_an_option
    with pytest.raises(AttributeError):  # read through the sections: no flat read
        _ = config.page_size


def test_every_engine_option_claims_yaml_uses_is_a_flat_option():
    claims = yaml.safe_load((REPO / "claims.yaml").read_text())["claims"]
    used = set()
    for claim in claims:
        for params in (claim.get("params") or {}).values():
            used |= set((params or {}).get("engine") or {})
    # hbm_utilization is the run context's: it sizes kv_pool_bytes from the chip's HBM.
    assert used and used - {"hbm_utilization"} <= set(SECTION_OF)
    assert set(SECTION_OF) == {f.name for cls in SECTIONS.values() for f in dataclasses.fields(cls)}
    assert isinstance(EngineConfig().scheduler, SchedulerConfig)


def test_the_configs_policy_names_are_the_policies_the_scheduler_implements():
    assert tuple(ORDERINGS) == SCHEDULING_POLICIES
    assert tuple(VICTIMS) == VICTIM_POLICIES


def test_from_flat_and_flat_are_inverses_at_the_edges():
    config = EngineConfig.from_flat(page_size=32, max_num_seqs=8, speculative="ngram")
    assert (config.cache.page_size, config.scheduler.max_num_seqs) == (32, 8)
    assert EngineConfig.from_flat(**config.flat()) == config
    with pytest.raises(TypeError, match="unexpected option"):
        EngineConfig.from_flat(pages=3)
    with pytest.raises(TypeError, match="section"):
        EngineConfig.from_flat(cache=CacheConfig())
