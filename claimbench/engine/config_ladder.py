"""Degradation ladder rungs: service cuts declared before the run (EngineConfig.ladder).

A ladder is an ordered tuple of rungs. Standing on rung k means the actions of rungs 1..k
are all in force; rung 0 is full service. Each rung names the action it adds, the load
signal it watches, the value of that signal that engages it and the (lower) value that
releases it:

    shed_tier_at_ingress(tier)   reject new requests of ``tier`` and every lower tier
                                 (higher number) when they are added
    cap_max_tokens(tier, n)      a request of ``tier`` or lower starting while engaged
                                 gets at most n output tokens
    disable_speculation          no draft is proposed or verified
    lower_token_budget(n)        a step schedules at most n tokens

    signals: waiting_requests (requests in the waiting queue), kv_usage (fraction of the
    usable KV pages in use, 0..1), oldest_wait_s (seconds the longest-waiting request has
    waited)

Ladders are data, so a YAML or JSON file declares one (``load_ladder``); the scheduler
climbs them (sched/ladder.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any

from claimbench.platform.yaml_file import load_yaml


class Action(StrEnum):
    SHED_TIER_AT_INGRESS = "shed_tier_at_ingress"
    CAP_MAX_TOKENS = "cap_max_tokens"
    DISABLE_SPECULATION = "disable_speculation"
    LOWER_TOKEN_BUDGET = "lower_token_budget"


class Signal(StrEnum):
    WAITING_REQUESTS = "waiting_requests"  # requests in the waiting queue
    KV_USAGE = "kv_usage"  # used / usable KV pages, in [0, 1]
    OLDEST_WAIT_S = "oldest_wait_s"  # now - arrival of the longest-waiting request

    @property
    def upper_bound(self) -> float:
        return 1.0 if self is Signal.KV_USAGE else float("inf")


# The parameter each action takes (beyond tier), and which actions name a tier.
_AMOUNT = {Action.CAP_MAX_TOKENS: "max_tokens", Action.LOWER_TOKEN_BUDGET: "token_budget"}
_TIERED = (Action.SHED_TIER_AT_INGRESS, Action.CAP_MAX_TOKENS)


@dataclass(frozen=True)
class Rung:
    """One step down in service: an action with the signal values that engage and release it."""

    action: Action
    signal: Signal
    engage: float  # climb onto this rung when the signal is >= engage
    release: float  # leave it when the signal is <= release (< engage)
    tier: int | None = None  # shed, cap: this tier and every lower one (higher number)
    max_tokens: int | None = None  # cap_max_tokens: output tokens at most
    token_budget: int | None = None  # lower_token_budget: tokens per step at most

    def __post_init__(self) -> None:
        object.__setattr__(self, "action", _enum(Action, self.action, "action"))
        object.__setattr__(self, "signal", _enum(Signal, self.signal, "signal"))
        for name in ("engage", "release"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"ladder rung {name} must be a number, got {value!r}")
        top = self.signal.upper_bound
        if not 0 <= self.release < self.engage <= top:
            raise ValueError(
                f"ladder rung {self.action.value} needs 0 <= release < engage <= {top:g} for "
                f"{self.signal.value}, got release={self.release!r}, engage={self.engage!r}"
            )
        needs = {_AMOUNT[self.action]} if self.action in _AMOUNT else set()
        if self.action in _TIERED:
            needs.add("tier")
        for name in ("tier", "max_tokens", "token_budget"):
            value = getattr(self, name)
            if name in needs and value is None:
                raise ValueError(f"ladder rung {self.action.value} needs {name}")
            if name not in needs and value is not None:
                raise ValueError(f"ladder rung {self.action.value} takes no {name}, got {value!r}")
            minimum = 0 if name == "tier" else 1
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < minimum
            ):
                raise ValueError(
                    f"ladder rung {self.action.value} {name} must be an integer >= {minimum}, "
                    f"got {value!r}"
                )

    def covers(self, tier: int) -> bool:
        """Whether a request of ``tier`` falls under this rung's tier."""
        return self.tier is not None and tier >= self.tier

    def describe(self) -> str:
        """e.g. 'shed_tier_at_ingress(tier=2) on waiting_requests >= 8, off <= 2'."""
        args = ", ".join(
            f"{name}={getattr(self, name)}"
            for name in ("tier", "max_tokens", "token_budget")
            if getattr(self, name) is not None
        )
        return (
            f"{self.action.value}({args}) on {self.signal.value} >= {self.engage:g}, "
            f"off <= {self.release:g}"
        )


def _enum(kind: type[Enum], value: object, name: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        choices = tuple(m.value for m in kind)
        raise ValueError(f"ladder rung {name} {value!r} is not one of {choices}") from None


def as_ladder(rungs: Iterable[Rung | Mapping[str, Any]]) -> tuple[Rung, ...]:
    """Rungs from Rung objects or mappings of their fields (as YAML gives them), in order."""
    if isinstance(rungs, str | bytes | Mapping) or not isinstance(rungs, Iterable):
        raise ValueError(f"a ladder must be a list of rungs, got {rungs!r}")
    known = {f.name for f in dataclasses.fields(Rung)}
    out = []
    for i, rung in enumerate(rungs, 1):
        if isinstance(rung, Mapping):
            unknown = sorted(set(rung) - known)
            if unknown:
                raise ValueError(f"ladder rung {i} has unknown fields {unknown}; known: {known}")
            missing = sorted({"action", "signal", "engage", "release"} - set(rung))
            if missing:
                raise ValueError(f"ladder rung {i} lacks {missing}")
            rung = Rung(**rung)
        if not isinstance(rung, Rung):
            raise ValueError(f"ladder rung {i} must be a Rung or a mapping, got {rung!r}")
        out.append(rung)
    return tuple(out)


def check_ladder(rungs: tuple[Rung, ...], max_num_batched_tokens: int) -> None:
    """What a rung can be checked against only with the engine's config."""
    for rung in rungs:
        if rung.token_budget is not None and rung.token_budget >= max_num_batched_tokens:
            raise ValueError(
                f"ladder rung lower_token_budget(token_budget={rung.token_budget}) does not "
                f"lower max_num_batched_tokens={max_num_batched_tokens}"
            )


def load_ladder(path: Path) -> tuple[Rung, ...]:
    """A ladder from a YAML (or JSON) file: a list of rungs, or a mapping whose one key is
    ``ladder``. A file that declares no rung is refused (a server asked for a ladder would
    otherwise run without one, silently), as is a mapping with any other key."""
    data = load_yaml(path, "the ladder file")
    if isinstance(data, Mapping):
        if set(data) != {"ladder"}:
            keys = sorted(str(k) for k in data)
            raise ValueError(f"{path}: a mapping must have the one key 'ladder', got {keys}")
        data = data["ladder"]
    try:
        rungs = as_ladder(data if data is not None else ())
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None
    if not rungs:
        raise ValueError(f"{path} declares no rungs (leave the ladder out for none)")
    return rungs
