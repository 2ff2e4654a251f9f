"""A whole workload: the tenants' loads, a seed and the run's bounds."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from claimbench.workload.tenants import TenantLoad
from claimbench.workload.trace import load_trace, tenant_rows, trace_rate
from claimbench.workload.validation import check_int, check_keys, check_positive


@dataclass(frozen=True)
class WorkloadSpec:
    """Tenants' loads plus the seed every random draw derives from.

    ``max_requests`` keeps the first n requests of the merged arrivals; ``max_duration_s``
    drops arrivals at or after that time. Both apply when requests are built, on top of
    each tenant's own bounds.
    """

    tenants: tuple[TenantLoad, ...]
    seed: int = 0
    max_requests: int | None = None
    max_duration_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tenants, list | tuple) or not self.tenants:
            raise ValueError(
                f"WorkloadSpec.tenants must be a non-empty tuple, got {self.tenants!r}"
            )
        for i, load in enumerate(self.tenants):
            if not isinstance(load, TenantLoad):
                raise ValueError(f"WorkloadSpec.tenants[{i}] must be a TenantLoad, got {load!r}")
        object.__setattr__(self, "tenants", tuple(self.tenants))
        names = [load.tenant for load in self.tenants]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"WorkloadSpec.tenants has duplicate tenant(s) {duplicates}")
        object.__setattr__(self, "seed", check_int("WorkloadSpec", "seed", self.seed, minimum=0))
        if self.max_requests is not None:
            value = check_int("WorkloadSpec", "max_requests", self.max_requests, minimum=1)
            object.__setattr__(self, "max_requests", value)
        if self.max_duration_s is not None:
            value = check_positive("WorkloadSpec", "max_duration_s", self.max_duration_s)
            object.__setattr__(self, "max_duration_s", value)
        if self.max_requests is None and self.max_duration_s is None:
            unbounded = [
                load.tenant
                for load in self.tenants
                if not load.is_trace and load.num_requests is None and load.duration_s is None
            ]
            if unbounded:
                raise ValueError(
                    f"WorkloadSpec: tenant(s) {unbounded} have neither num_requests nor "
                    "duration_s, and max_requests and max_duration_s are both None"
                )

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (for run metadata); ``from_dict`` inverts it."""
        return {
            "tenants": [load.to_dict() for load in self.tenants],
            "seed": self.seed,
            "max_requests": self.max_requests,
            "max_duration_s": self.max_duration_s,
        }

    @classmethod
    def from_dict(cls, data: dict) -> WorkloadSpec:
        names = {f.name for f in dataclasses.fields(cls)}
        check_keys("WorkloadSpec", data, names, {"tenants"})
        tenants = data["tenants"]
        if not isinstance(tenants, list | tuple):
            raise ValueError(f"WorkloadSpec.tenants must be a list, got {tenants!r}")
        return cls(**{**data, "tenants": tuple(TenantLoad.from_dict(t) for t in tenants)})


def tenant_rate(load: TenantLoad) -> float:
    """Mean offered requests/s of ``load``: its rate, or a trace tenant's recorded rate."""
    if load.rate is not None:
        return load.rate
    return trace_rate(
        tenant_rows(load_trace(load.trace_path), load.tenant, load.trace_path), load.trace_path
    )


def tenant_tokens_per_request(load: TenantLoad) -> float:
    """Mean prompt (system prompt included) plus output tokens of one of ``load``'s requests."""
    if load.is_trace:
        rows = tenant_rows(load_trace(load.trace_path), load.tenant, load.trace_path)
        lengths = float((rows["prompt_len"] + rows["output_len"]).mean())
    else:
        lengths = load.prompt_len.expected_len() + load.output_len.expected_len()
    return load.system_prompt_len + lengths


def scale_rates(spec: WorkloadSpec, factor: float) -> WorkloadSpec:
    """``spec`` with every tenant's mean rate multiplied by ``factor``.

    A trace tenant without a rate gets one: its recorded rate times ``factor``, which
    compresses its timestamps. The seed is kept, so the i-th request of a tenant keeps its
    lengths and tokens and only its arrival time moves.
    """
    factor = check_positive("scale_rates", "factor", factor)
    tenants = tuple(
        dataclasses.replace(load, rate=tenant_rate(load) * factor) for load in spec.tenants
    )
    return dataclasses.replace(spec, tenants=tenants)


def offered_requests_per_s(spec: WorkloadSpec) -> float:
    """Mean requests/s the tenants offer together (before the run's bounds)."""
    return sum(tenant_rate(load) for load in spec.tenants)


def offered_tokens_per_s(spec: WorkloadSpec) -> float:
    """Mean prompt + output tokens/s the tenants offer together (before the run's bounds)."""
    return sum(tenant_rate(load) * tenant_tokens_per_request(load) for load in spec.tenants)
