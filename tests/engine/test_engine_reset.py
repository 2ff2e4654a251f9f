import dataclasses

import pytest
from engine_helpers import shared_tiny_engine

from claimbench.engine.config_tenants import Tenant
from claimbench.engine.sampling_params import SamplingParams


def test_reset_switches_host_policy_and_forgets_requests():
    engine = shared_tiny_engine()
    engine.add_request([5, 6, 7], SamplingParams(max_tokens=2))
    runner = engine.runner
    config = dataclasses.replace(
        engine.config, scheduling_policy="wvtc", tenants=(Tenant("a", weight=2.0),)
    )
    engine.reset(config)
    assert engine.runner is runner and engine.config is config
    assert engine.requests == {} and not engine.has_unfinished
    assert engine.scheduler.ordering.name == "wvtc"
    assert engine.scheduler.tenants.weight("a") == 2.0
    assert engine.add_request([5, 6, 7]) == "req-0"


def test_reset_refuses_what_shapes_the_compiled_steps():
    engine = shared_tiny_engine()
    with pytest.raises(ValueError, match=r"not \['max_num_seqs'\]"):
        engine.reset(dataclasses.replace(engine.config, max_num_seqs=4))
