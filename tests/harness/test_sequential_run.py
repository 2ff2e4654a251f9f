"""run --until-decided's driver: blocks of trials, why it stops, what the run records."""

from __future__ import annotations

import json
from types import ModuleType

import numpy as np
import pandas as pd
import pytest

from claimbench.harness import stopping
from claimbench.harness.context import RunContext, TrialProgress, run_claim
from claimbench.harness.sequential_run import run_blocks
from claimbench.harness.stopping import StoppingRule
from tests.scoring_helpers import claim as make_claim

HARDWARE = {"platform": "cpu", "price_per_hour": 0.0}


def _experiment(mean: float, sd: float, seen: list | None = None) -> ModuleType:
    """A fake experiment: each trial records ``gain`` drawn around ``mean`` from its seed."""
    module = ModuleType("fake_sequential")

    def run(ctx: RunContext) -> None:
        if seen is not None:
            seen.append((ctx.trials, ctx.trial_offset, ctx.seed))
        ctx.record_analytic("bytes", 2.0, inputs={"a": 1})
        for trial in range(ctx.trials):
            rng = np.random.default_rng(ctx.seed + trial)
            ctx.record("gain", float(rng.normal(mean, sd)), trial=trial, unit="x")
            ctx.save_frames(steps=pd.DataFrame({"num_seqs": [1]}), trial=trial)

    module.run = run
    return module


def _context(total: int) -> RunContext:
    return RunContext(
        claim_id="c",
        profile="quick",
        params={},
        trials=1,
        seed=100,
        hardware=dict(HARDWARE),
        dtype="float32",
        progress=TrialProgress(total=total),
    )


def test_a_clear_effect_stops_decided_with_trials_numbered_across_blocks():
    seen: list = []
    ctx = _context(20)
    rule = StoppingRule(block_trials=5, max_trials=20)
    stopped = run_blocks(ctx, _experiment(3.0, 0.05, seen), make_claim(), rule)
    assert stopped.reason == stopping.STOP_DECIDED
    assert stopped.num_trials == 5 * len(seen) < 20
    # Each block continues the trial numbering and the seeds of one long run.
    assert seen[0] == (5, 0, 100)
    if len(seen) > 1:
        assert seen[1] == (5, 5, 105)
    frame = ctx.measurements_frame("r")
    gains = frame[frame["metric"] == "gain"]
    assert sorted(gains["trial"]) == list(range(stopped.num_trials))
    assert (frame["metric"] == "bytes").sum() == 1  # analytic: recorded once, not per block
    steps = ctx.frames()["steps"]
    assert sorted(steps["trial"]) == list(range(stopped.num_trials))  # frames' labels too


def test_noise_at_the_threshold_runs_to_the_cap():
    rule = StoppingRule(block_trials=5, max_trials=15)
    stopped = run_blocks(_context(15), _experiment(1.5, 0.5), make_claim(), rule)
    assert (stopped.reason, stopped.num_trials) == (stopping.STOP_MAX_TRIALS, 15)


def test_a_claim_this_hardware_cannot_decide_stops_after_one_block():
    rule = StoppingRule(block_trials=5, max_trials=20)
    stopped = run_blocks(_context(20), _experiment(1.5, 0.5), make_claim(scope="tpu"), rule)
    assert (stopped.reason, stopped.num_trials) == (stopping.STOP_OUT_OF_SCOPE, 5)


def test_the_gate_is_asked_before_every_further_block():
    asked = []

    def gate(size: int, spent_usd: float) -> str | None:
        asked.append(size)
        return "over budget: 0.10 USD left, the next block costs 0.30" if len(asked) == 2 else None

    rule = StoppingRule(block_trials=4, max_trials=40)
    stopped = run_blocks(
        _context(40), _experiment(1.5, 0.5), make_claim(), rule, gate=gate, price_per_hour=1.0
    )
    assert stopped.reason == stopping.STOP_BUDGET and "over budget" in stopped.detail
    assert stopped.num_trials == 8 and asked == [4, 4]


def test_the_time_cap_stops_it():
    ticks = iter(range(0, 10_000, 200))  # each look at the clock is 200 s later
    rule = StoppingRule(block_trials=3, max_trials=30, max_minutes=10)
    stopped = run_blocks(
        _context(30), _experiment(1.5, 0.5), make_claim(), rule, clock=lambda: next(ticks)
    )
    assert stopped.reason == stopping.STOP_MAX_MINUTES
    assert stopped.num_trials < 30


@pytest.fixture
def project(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "c.py").write_text(
        "import numpy as np\n\n\ndef run(ctx):\n"
        "    for trial in range(ctx.trials):\n"
        "        rng = np.random.default_rng(ctx.seed + trial)\n"
        "        ctx.record('gain', float(rng.normal(3.0, 0.05)), trial=trial, unit='x')\n"
    )
    return tmp_path


def test_the_stored_run_records_its_stopping_rule(project):
    from claimbench.harness import registry

    claim = make_claim()
    module = registry.load_experiment(project, claim)
    run_dir = run_claim(
        claim,
        module,
        root=project,
        results_dir=project / "results",
        profile="quick",
        trials=None,
        seed=0,
        dtype="float32",
        stopping_rule=StoppingRule(block_trials=5, max_trials=20),
    )
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["stopping"]["rule"] == stopping.SEQUENTIAL
    assert meta["stopping"]["reason"] == stopping.STOP_DECIDED
    assert meta["trials"] == meta["stopping"]["num_trials"]
    assert meta["trials"] % 5 == 0
