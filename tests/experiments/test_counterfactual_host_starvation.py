"""host-starvation's counterfactuals, the real experiment at tiny size with one thing changed.

device-heavy puts both arms on a device whose step dwarfs the host's work
(lab/engines/slow_device.py), so the host's share of the synchronous step lands under its threshold.
overlap-off serves the on arm synchronously too: on the real CPU device two synchronous tiny arms
can differ by far more than 10% (a busy host's jitter is most of a tiny step), so its gain is
measured on a device step that dwarfs the host's work, where that jitter is a small part of each
period."""

import pytest
from counterfactual_helpers import assert_fails, assert_mean_fails, metric_values
from tenant_exp_helpers import experiment, run_tiny, write_checkpoint
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


@pytest.mark.slow
def test_a_heavy_device_leaves_the_host_a_small_share_of_the_step(checkpoint):
    ctx = run_tiny(CLAIM, checkpoint, trials=1, base=TINY, counterfactual="device-heavy")
    frame = ctx.measurements_frame("run")
    # Every measured decode period holds at least the device's step.
    steps = ctx.frames()["steps"]
    assert (steps["host_blocked_s"].max()) >= 0.5 * experiment(CLAIM).DEVICE_HEAVY_S
    assert_fails(CLAIM, "host_share_pct", metric_values(frame, "host_share_pct"))


@pytest.mark.slow
def test_overlap_off_on_a_heavy_device_gains_nothing(checkpoint):
    ctx = run_tiny(
        CLAIM, checkpoint, trials=2, base=TINY, counterfactual="overlap-off", device_step_s=0.2
    )
    frame = ctx.measurements_frame("run")
    assert_mean_fails(CLAIM, "overlap_gain_pct", metric_values(frame, "overlap_gain_pct"))
