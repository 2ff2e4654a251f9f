"""One tenant's share of a workload: how its requests arrive and how long they are."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, fields
from pathlib import Path

from claimbench.workload.arrivals import ARRIVAL_KINDS
from claimbench.workload.lengths import (
    EmpiricalLength,
    FixedLength,
    LengthDist,
    LognormalLength,
    UniformLength,
    length_dist_from_dict,
)
from claimbench.workload.trace import load_trace
from claimbench.workload.validation import check_int, check_keys, check_name, check_positive

TENANT_ARRIVALS = (*ARRIVAL_KINDS, "trace")
_LENGTH_TYPES = (FixedLength, UniformLength, LognormalLength, EmpiricalLength)


@dataclass(frozen=True)
class TenantLoad:
    """The requests one tenant sends.

    arrival: poisson | gamma | constant at ``rate`` requests/s (``burstiness`` only for
    gamma, as vLLM's benchmark defines it), or trace: replay this tenant's rows of
    ``trace_path``, with their own lengths; a trace tenant's ``rate``, if set, rescales
    its recorded timestamps to that mean rate.
    Each prompt is ``system_prompt_len`` shared tokens followed by ``prompt_len`` tokens of
    its own; ``output_len`` becomes the request's max_tokens. The system prompt is the same
    for every request of the tenant; tenants naming the same ``system_prompt_group`` share
    one (a shorter one is a prefix of a longer one), others each get their own.
    The tenant's requests stop after ``num_requests`` and/or at ``duration_s`` seconds; a
    tenant without either is bounded by the workload's max_requests or max_duration_s.
    """

    tenant: str
    _: KW_ONLY
    arrival: str = "poisson"
    rate: float | None = None
    burstiness: float = 1.0
    prompt_len: LengthDist | None = None
    output_len: LengthDist | None = None
    priority: int = 0
    system_prompt_len: int = 0
    system_prompt_group: str | None = None
    num_requests: int | None = None
    duration_s: float | None = None
    trace_path: str | None = None

    def __post_init__(self) -> None:
        check_name("TenantLoad", "tenant", self.tenant)
        owner = f"TenantLoad({self.tenant!r})"
        if self.arrival not in TENANT_ARRIVALS:
            raise ValueError(
                f"{owner}.arrival must be one of {TENANT_ARRIVALS}, got {self.arrival!r}"
            )
        self._set("burstiness", check_positive(owner, "burstiness", self.burstiness))
        if self.arrival != "gamma" and self.burstiness != 1.0:
            raise ValueError(
                f"{owner}.burstiness={self.burstiness} applies only to arrival='gamma', "
                f"not {self.arrival!r}"
            )
        if self.rate is not None:
            self._set("rate", check_positive(owner, "rate", self.rate))
        self._set("priority", check_int(owner, "priority", self.priority))
        self._set(
            "system_prompt_len",
            check_int(owner, "system_prompt_len", self.system_prompt_len, minimum=0),
        )
        if self.system_prompt_group is not None:
            check_name(owner, "system_prompt_group", self.system_prompt_group)
            if self.system_prompt_len == 0:
                raise ValueError(
                    f"{owner}.system_prompt_group={self.system_prompt_group!r} needs "
                    "system_prompt_len > 0"
                )
        if self.num_requests is not None:
            self._set(
                "num_requests", check_int(owner, "num_requests", self.num_requests, minimum=1)
            )
        if self.duration_s is not None:
            self._set("duration_s", check_positive(owner, "duration_s", self.duration_s))
        if self.is_trace:
            self._check_trace(owner)
        else:
            self._check_synthetic(owner)

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)

    def _check_synthetic(self, owner: str) -> None:
        if self.rate is None:
            raise ValueError(f"{owner}.rate must be set (> 0) for arrival={self.arrival!r}")
        if self.trace_path is not None:
            raise ValueError(
                f"{owner}.trace_path={self.trace_path!r} applies only to arrival='trace'"
            )
        for name in ("prompt_len", "output_len"):
            value = getattr(self, name)
            if not isinstance(value, _LENGTH_TYPES):
                raise ValueError(f"{owner}.{name} must be a length distribution, got {value!r}")

    def _check_trace(self, owner: str) -> None:
        if not isinstance(self.trace_path, str | os.PathLike) or not str(self.trace_path):
            raise ValueError(f"{owner}.trace_path must name a trace file, got {self.trace_path!r}")
        self._set("trace_path", str(self.trace_path))
        for name in ("prompt_len", "output_len"):
            if getattr(self, name) is not None:
                raise ValueError(
                    f"{owner}.{name} must be None for arrival='trace': the trace gives lengths"
                )

    @property
    def is_trace(self) -> bool:
        return self.arrival == "trace"

    def to_dict(self) -> dict:
        """Plain JSON-ready dict; ``from_dict`` inverts it."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("prompt_len", "output_len"):
            if out[name] is not None:
                out[name] = out[name].to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict) -> TenantLoad:
        names = {f.name for f in fields(cls)}
        check_keys("TenantLoad", data, names, {"tenant"})
        data = dict(data)
        for name in ("prompt_len", "output_len"):
            if data.get(name) is not None:
                data[name] = length_dist_from_dict(data[name])
        return cls(**data)


def tenants_from_trace(
    path: str | Path, *, priorities: Mapping[str, int] | None = None
) -> tuple[TenantLoad, ...]:
    """One trace-replay TenantLoad per tenant in the trace at ``path``, in order of first
    arrival, with priority from ``priorities`` (default 0)."""
    trace = load_trace(path)
    priorities = priorities or {}
    unknown = sorted(set(priorities) - set(trace["tenant"]))
    if unknown:
        raise ValueError(f"trace {path}: priorities name tenant(s) {unknown} not in the trace")
    return tuple(
        TenantLoad(name, arrival="trace", trace_path=str(path), priority=priorities.get(name, 0))
        for name in trace["tenant"].unique()
    )
