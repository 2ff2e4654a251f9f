"""host-starvation's counterfactual: overlap-off serves the on arm synchronously too.

At tiny size on a shared CPU two synchronous arms can differ by far more than the claim's 10%
(one run measured +111%), so this test checks the switch itself: every measured arm is served
with async scheduling off, where without it the on arm is served with it on."""

import pytest
from tenant_exp_helpers import experiment, write_checkpoint
from test_exp_host_starvation import TINY

from claimbench.harness.context import RunContext

CLAIM = "host-starvation"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "model")


def async_settings(monkeypatch, checkpoint, **params) -> list[bool]:
    """The async_scheduling each measured arm's reset asked for (after one untimed warm-up
    reset per arm, which warms both paths whatever the counterfactual)."""
    module = experiment(CLAIM)
    seen: list[bool] = []
    real = module.reset_with

    def spy(engine, **changes):
        seen.append(changes["async_scheduling"])
        return real(engine, **changes)

    monkeypatch.setattr(module, "reset_with", spy)
    ctx = RunContext(
        claim_id=CLAIM,
        profile="quick",
        params=TINY | params,
        trials=1,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="float32",
        model_option=checkpoint,
    )
    module.run(ctx)
    return seen[len(module.MODES) :]


@pytest.mark.slow
def test_overlap_off_serves_both_arms_synchronously(monkeypatch, checkpoint):
    assert async_settings(monkeypatch, checkpoint, counterfactual="overlap-off") == [False, False]
    assert sorted(async_settings(monkeypatch, checkpoint)) == [False, True]
