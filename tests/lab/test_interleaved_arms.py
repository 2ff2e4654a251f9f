"""Arms take turns within every trial (ABBA), one engine alive at a time."""

import gc
import weakref
from dataclasses import dataclass, field

import pytest

from claimbench.lab.engines.interleaved_arms import abba_order, interleaved_trials


class FakeEngine:
    def __init__(self, arm: str) -> None:
        self.arm = arm


@dataclass
class FakeContext:
    """What interleaved_trials reads of a RunContext: trials and the engine factory."""

    trials: int
    built: list[tuple[str, int]] = field(default_factory=list)  # (arm, engines alive then)
    alive: list[weakref.ref] = field(default_factory=list)

    def engine(self, **options: str) -> FakeEngine:
        gc.collect()
        self.built.append((options["arm"], sum(r() is not None for r in self.alive)))
        made = FakeEngine(options["arm"])
        self.alive.append(weakref.ref(made))
        return made


def test_abba_order_reverses_every_other_trial():
    assert [abba_order(["a", "b"], t) for t in range(4)] == [
        ["a", "b"],
        ["b", "a"],
        ["a", "b"],
        ["b", "a"],
    ]
    assert abba_order(["a", "b", "c"], 1) == ["c", "b", "a"]


@pytest.mark.slow
def test_arms_alternate_within_trials_and_share_positions():
    ctx = FakeContext(trials=4)
    calls: list[tuple[str, int]] = []
    warmed: list[str] = []

    def measure(arm: str, engine: FakeEngine, trial: int) -> str:
        assert engine.arm == arm  # each arm measured on its own engine
        calls.append((arm, trial))
        return f"{arm}{trial}"

    options = {"a": {"arm": "a"}, "b": {"arm": "b"}}
    results = interleaved_trials(ctx, options, measure, on_build=lambda a, e: warmed.append(a))
    # Every trial runs both arms, and the first position alternates: a drift over the run
    # lands on both arms, where running all of one arm's trials first put it on one.
    assert calls == [
        ("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2), ("b", 3), ("a", 3),
    ]  # fmt: skip
    assert results == {"a": ["a0", "a1", "a2", "a3"], "b": ["b0", "b1", "b2", "b3"]}
    # The arm that ends a trial starts the next on the engine it has: trials + 1 builds,
    # never two alive, each warmed once.
    assert ctx.built == [("a", 0), ("b", 0), ("a", 0), ("b", 0), ("a", 0)]
    assert warmed == ["a", "b", "a", "b", "a"]


def test_no_arms_is_an_error():
    with pytest.raises(ValueError, match="at least one arm"):
        interleaved_trials(FakeContext(trials=1), {}, lambda a, e, t: None)
