"""Degradation ladder at runtime: where the engine stands on its rungs (config_ladder.py).

The scheduler observes the signals once per step, before it schedules: it climbs one rung
when the next rung's signal is at or above that rung's engage value, else descends one rung
when the current rung's signal is at or below its release value. release < engage is the
hysteresis that keeps a load hovering at one threshold from toggling a rung every step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from claimbench.engine.config_ladder import Action, Rung, Signal


@dataclass(frozen=True)
class Transition:
    """One move on the ladder: when, from which rung to which, and the signal that moved it."""

    time: float
    from_rung: int
    to_rung: int
    signal: Signal
    value: float


class LadderState:
    """Where the engine stands on its ladder, and the cuts in force there."""

    def __init__(self, rungs: tuple[Rung, ...]) -> None:
        self.rungs = rungs
        self.rung = 0  # 0 = full service; k = rungs[:k] in force
        self.transitions: list[Transition] = []

    @property
    def active(self) -> tuple[Rung, ...]:
        return self.rungs[: self.rung]

    def observe(self, signals: Mapping[Signal, float], now: float) -> int:
        """Move at most one rung on this step's ``signals``; returns the rung stood on."""
        if self.rung < len(self.rungs):
            nxt = self.rungs[self.rung]
            if signals[nxt.signal] >= nxt.engage:
                return self._move(self.rung + 1, nxt.signal, signals[nxt.signal], now)
        if self.rung > 0:
            current = self.rungs[self.rung - 1]
            if signals[current.signal] <= current.release:
                return self._move(self.rung - 1, current.signal, signals[current.signal], now)
        return self.rung

    def _move(self, to_rung: int, signal: Signal, value: float, now: float) -> int:
        self.transitions.append(Transition(now, self.rung, to_rung, signal, float(value)))
        self.rung = to_rung
        return to_rung

    def shed_reason(self, tier: int) -> str | None:
        """Why a new request of ``tier`` is shed at ingress now, or None."""
        for k, rung in enumerate(self.active, 1):
            if rung.action is Action.SHED_TIER_AT_INGRESS and rung.covers(tier):
                return f"tier {tier} shed at ingress (ladder_shed=rung {k}: {rung.describe()})"
        return None

    def max_tokens_cap(self, tier: int) -> int | None:
        """The output-token cap on a request of ``tier`` starting now, or None."""
        caps = [
            r.max_tokens
            for r in self.active
            if r.action is Action.CAP_MAX_TOKENS and r.covers(tier) and r.max_tokens is not None
        ]
        return min(caps) if caps else None

    @property
    def speculation_disabled(self) -> bool:
        return any(r.action is Action.DISABLE_SPECULATION for r in self.active)

    def token_budget(self, configured: int) -> int:
        """This step's token budget: ``configured`` or a lowering rung's, the lowest."""
        budgets = [r.token_budget for r in self.active if r.token_budget is not None]
        return min([configured, *budgets])
