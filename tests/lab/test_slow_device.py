"""lab/engines/slow_device.py: a fixed device step time around the real runner, sync and async."""

import pytest
from engine_helpers import shared_tiny_engine, tiny_engine

from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.engines.slow_device import slow_device

STEP_S = 0.05
PROMPTS = [[3, 5, 7], [11, 13, 17, 19]]


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_each_step_waits_at_least_the_device_step_and_tokens_are_unchanged(async_scheduling):
    engine = tiny_engine(async_scheduling=async_scheduling)
    sampling = SamplingParams(max_tokens=4, ignore_eos=True)
    plain = [o.token_ids for o in engine.generate(PROMPTS, sampling)]
    engine.reset()
    with slow_device(engine, STEP_S):
        slowed = [o.token_ids for o in engine.generate(PROMPTS, sampling)]
    assert slowed == plain
    steps = engine.steps_frame()
    # The device runs one step at a time: step k's outputs are ready no sooner than (k + 1)
    # device steps after the first starts, and even async scheduling builds step k + 2 only
    # after step k is ready, however much host work the device's wait overlaps.
    starts = steps["start_s"].to_numpy()
    assert len(starts) >= 4
    assert starts[-1] - starts[0] >= (len(starts) - 2) * STEP_S
    assert "execute" not in vars(engine.runner)  # the runner's own method again


@pytest.mark.parametrize("step_s", [0, -1, 10, True, "0.1"])
def test_a_step_time_outside_the_range_is_named(step_s):
    engine = shared_tiny_engine()
    with pytest.raises(ValueError, match="step_s"), slow_device(engine, step_s):
        pass
