import json

import numpy as np
import pytest

from claimbench.workload.lengths import EmpiricalLength, FixedLength, LognormalLength, UniformLength
from claimbench.workload.spec import (
    WorkloadSpec,
    offered_requests_per_s,
    offered_tokens_per_s,
    scale_rates,
)
from claimbench.workload.tenants import TenantLoad

FIXED = {"prompt_len": FixedLength(8), "output_len": FixedLength(4)}


def _spec() -> WorkloadSpec:
    return WorkloadSpec(
        (
            TenantLoad(
                "chat",
                arrival="gamma",
                rate=2.5,
                burstiness=0.5,
                prompt_len=LognormalLength(median=64, sigma=0.7, lo=4, hi=512),
                output_len=UniformLength(8, 32),
                priority=1,
                system_prompt_len=16,
                system_prompt_group="shared",
                duration_s=30.0,
            ),
            TenantLoad(
                "batch",
                arrival="constant",
                rate=np.float64(0.5),
                prompt_len=EmpiricalLength((100, 200, 300), hi=250),
                output_len=LognormalLength(mean=40.0, sigma=0.3, lo=1, hi=128),
                num_requests=np.int64(10),
            ),
            TenantLoad("probe", rate=1, **FIXED),
        ),
        seed=7,
        max_requests=200,
        max_duration_s=60,
    )


def test_dict_round_trip_through_json():
    spec = _spec()
    data = json.loads(json.dumps(spec.to_dict(), allow_nan=False))
    assert WorkloadSpec.from_dict(data) == spec
    assert WorkloadSpec.from_dict(data).to_dict() == spec.to_dict()
    # numpy scalars are normalised to plain Python numbers.
    assert type(spec.tenants[1].rate) is float and type(spec.tenants[1].num_requests) is int


def test_scale_rates_multiplies_every_rate_and_offered_load():
    spec = _spec()
    doubled = scale_rates(spec, 2.0)
    assert [t.rate for t in doubled.tenants] == [5.0, 1.0, 2.0]
    assert doubled.seed == spec.seed and doubled.tenants[0].burstiness == 0.5
    assert offered_requests_per_s(spec) == pytest.approx(4.0)
    assert offered_tokens_per_s(doubled) == pytest.approx(2 * offered_tokens_per_s(spec))


def test_offered_tokens_per_s_by_hand():
    spec = WorkloadSpec(
        (
            TenantLoad("a", rate=2.0, system_prompt_len=10, **FIXED),
            TenantLoad("b", rate=0.5, prompt_len=UniformLength(10, 20), output_len=FixedLength(5)),
        ),
        max_requests=5,
    )
    # a: 2 req/s * (10 + 8 + 4) = 44; b: 0.5 req/s * (15 + 5) = 10.
    assert offered_tokens_per_s(spec) == pytest.approx(54.0)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: TenantLoad("", rate=1, **FIXED), r"TenantLoad.tenant must be a non-empty string"),
        (
            lambda: TenantLoad("a", rate=-2, **FIXED),
            r"TenantLoad\('a'\).rate must be finite and > 0, got -2",
        ),
        (lambda: TenantLoad("a", **FIXED), r"TenantLoad\('a'\).rate must be set"),
        (lambda: TenantLoad("a", arrival="bursty", rate=1, **FIXED), r"arrival must be one of"),
        (
            lambda: TenantLoad("a", rate=1, burstiness=0.5, **FIXED),
            r"burstiness=0.5 applies only to arrival='gamma', not 'poisson'",
        ),
        (
            lambda: TenantLoad("a", arrival="gamma", rate=1, burstiness=0, **FIXED),
            r"burstiness must be finite and > 0, got 0",
        ),
        (
            lambda: TenantLoad("a", rate=1, output_len=FixedLength(2)),
            r"prompt_len must be a length",
        ),
        (
            lambda: TenantLoad("a", rate=1, num_requests=0, **FIXED),
            r"num_requests must be >= 1, got 0",
        ),
        (lambda: TenantLoad("a", rate=1, duration_s=0.0, **FIXED), r"duration_s must be finite"),
        (
            lambda: TenantLoad("a", rate=1, system_prompt_len=-1, **FIXED),
            r"system_prompt_len must be >= 0",
        ),
        (
            lambda: TenantLoad("a", rate=1, priority=1.5, **FIXED),
            r"priority must be an integer, got 1.5",
        ),
        (
            lambda: TenantLoad("a", rate=1, system_prompt_group="g", **FIXED),
            r"system_prompt_group='g' needs system_prompt_len > 0",
        ),
        (
            lambda: TenantLoad("a", rate=1, trace_path="t.csv", **FIXED),
            r"applies only to arrival='trace'",
        ),
        (lambda: TenantLoad("a", arrival="trace"), r"trace_path must name a trace file, got None"),
        (
            lambda: TenantLoad("a", arrival="trace", trace_path="t.csv", prompt_len=FixedLength(3)),
            r"prompt_len must be None for arrival='trace'",
        ),
        (lambda: WorkloadSpec(()), r"WorkloadSpec.tenants must be a non-empty tuple"),
        (
            lambda: WorkloadSpec((TenantLoad("a", rate=1, **FIXED),) * 2, max_requests=3),
            r"duplicate tenant\(s\) \['a'\]",
        ),
        (
            lambda: WorkloadSpec((TenantLoad("a", rate=1, **FIXED),)),
            r"\['a'\] have neither num_requests",
        ),
        (
            lambda: WorkloadSpec((TenantLoad("a", rate=1, **FIXED),), seed=-1, max_requests=2),
            r"WorkloadSpec.seed must be >= 0, got -1",
        ),
        (
            lambda: WorkloadSpec((TenantLoad("a", rate=1, **FIXED),), max_duration_s=float("nan")),
            r"max_duration_s must be finite and > 0, got nan",
        ),
        (
            lambda: WorkloadSpec.from_dict({"tenants": [], "speed": 1}),
            r"unknown key\(s\) \['speed'\]",
        ),
        (lambda: WorkloadSpec.from_dict({"seed": 1}), r"missing key\(s\) \['tenants'\]"),
        (
            lambda: WorkloadSpec.from_dict({"tenants": [{"tenant": "a", "rates": 1}]}),
            r"TenantLoad: unknown key\(s\) \['rates'\]",
        ),
        (lambda: scale_rates(_spec(), 0.0), r"scale_rates.factor must be finite and > 0, got 0.0"),
    ],
)
def test_validation_errors_name_field_and_value(make, match):
    with pytest.raises(ValueError, match=match):
        make()
