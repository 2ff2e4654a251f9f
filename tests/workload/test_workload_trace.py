import pandas as pd
import pytest

from claimbench.workload.build import build_requests
from claimbench.workload.spec import (
    WorkloadSpec,
    offered_requests_per_s,
    offered_tokens_per_s,
    scale_rates,
)
from claimbench.workload.tenants import TenantLoad, tenants_from_trace
from claimbench.workload.tokens import random_token_source
from claimbench.workload.trace import load_trace

# Absolute epoch timestamps, out of order, tenant ids that look numeric.
ROWS = {
    "timestamp": [1_700_000_002.0, 1_700_000_000.0, 1_700_000_001.0, 1_700_000_004.0],
    "tenant": ["007", "007", "b", "b"],
    "prompt_len": [30, 10, 20, 40],
    "output_len": [3, 1, 2, 4],
}


def _write(tmp_path, fmt: str, rows: dict = ROWS, name: str = "trace"):
    path = tmp_path / f"{name}.{fmt}"
    frame = pd.DataFrame(rows)
    if fmt == "csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)
    return path


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_load_sorts_and_starts_at_zero(tmp_path, fmt):
    trace = load_trace(_write(tmp_path, fmt))
    assert trace["timestamp"].tolist() == [0.0, 1.0, 2.0, 4.0]
    assert trace["tenant"].tolist() == ["007", "b", "007", "b"]
    assert trace["prompt_len"].tolist() == [10, 20, 30, 40]
    assert trace["output_len"].tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_replay_builds_the_recorded_requests(tmp_path, fmt):
    path = _write(tmp_path, fmt)
    spec = WorkloadSpec(tenants_from_trace(path, priorities={"b": 2}))
    requests = build_requests(spec, random_token_source(50))
    assert [(r.arrival_s, r.tenant, r.priority) for r in requests] == [
        (0.0, "007", 0),
        (1.0, "b", 2),
        (2.0, "007", 0),
        (4.0, "b", 2),
    ]
    assert [(r.prompt_len, r.max_tokens) for r in requests] == [(10, 1), (20, 2), (30, 3), (40, 4)]
    assert [r.request_index for r in requests] == [0, 1, 2, 3]


def test_replay_bounds_rate_and_system_prompt(tmp_path):
    path = _write(tmp_path, "csv")
    b_only = TenantLoad("b", arrival="trace", trace_path=str(path), system_prompt_len=5)
    requests = build_requests(WorkloadSpec((b_only,)), random_token_source(50))
    assert [r.prompt_len for r in requests] == [25, 45]
    assert requests[0].prompt_token_ids[:5] == requests[1].prompt_token_ids[:5]
    # Tenant b's recorded rate: 1 gap of 3 s. Doubling it halves its timestamps.
    assert offered_requests_per_s(WorkloadSpec((b_only,))) == pytest.approx(1 / 3)
    faster = scale_rates(WorkloadSpec((b_only,)), 2.0)
    assert faster.tenants[0].rate == pytest.approx(2 / 3)
    assert [r.arrival_s for r in build_requests(faster, random_token_source(50))] == [0.5, 2.0]
    bounded = WorkloadSpec((b_only,), max_duration_s=3.0)
    assert [r.arrival_s for r in build_requests(bounded, random_token_source(50))] == [1.0]
    # Mean tokens per request: 5 + (20 + 2 + 40 + 4) / 2 = 38, offered at 1/3 request/s.
    assert offered_tokens_per_s(WorkloadSpec((b_only,))) == pytest.approx(38 / 3)


def test_trace_tenant_missing_from_file(tmp_path):
    path = _write(tmp_path, "csv")
    load = TenantLoad("nobody", arrival="trace", trace_path=str(path))
    with pytest.raises(ValueError, match=r"no rows for tenant 'nobody'; tenants: \['007', 'b'\]"):
        build_requests(WorkloadSpec((load,)), random_token_source(50))


def _bad(**changes) -> dict:
    return {**ROWS, **changes}


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize(
    ("rows", "match"),
    [
        (
            {k: v for k, v in ROWS.items() if k != "output_len"},
            r"missing column\(s\) \['output_len'\]",
        ),
        (
            _bad(prompt_len=[10, "ten", 3, 4]),
            r"'prompt_len' has non-numeric value 'ten' at data row 2",
        ),
        (_bad(timestamp=[0.0, None, 1.0, 2.0]), r"'timestamp' has a missing value at data row 2"),
        (
            _bad(timestamp=[0.0, -1.0, 1.0, 2.0]),
            r"'timestamp' has negative value -1.0 at data row 2",
        ),
        (_bad(output_len=[1, 2, -3, 4]), r"'output_len' must hold whole token counts >= 1, got -3"),
        (
            _bad(prompt_len=[10, 2.5, 3, 4]),
            r"'prompt_len' must hold whole token counts >= 1, got 2.5",
        ),
        (_bad(tenant=["a", None, "b", "b"]), r"'tenant' has a missing value at data row 2"),
        ({k: [] for k in ROWS}, "has no rows"),
    ],
)
def test_bad_trace_is_one_line_naming_file(tmp_path, fmt, rows, match):
    if fmt == "parquet" and "ten" in rows.get("prompt_len", []):
        # Parquet columns are typed: a mixed column is written as text.
        rows = {**rows, "prompt_len": [str(v) for v in rows["prompt_len"]]}
    path = _write(tmp_path, fmt, rows)
    with pytest.raises(ValueError, match=match) as err:
        load_trace(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"trace {path}:")


def test_unreadable_or_unknown_files(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        load_trace(tmp_path / "absent.csv")
    (tmp_path / "t.json").write_text("{}")
    with pytest.raises(ValueError, match="unknown format"):
        load_trace(tmp_path / "t.json")
    (tmp_path / "t.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match=r"cannot read as parquet") as err:
        load_trace(tmp_path / "t.parquet")
    assert "\n" not in str(err.value)
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match=r"cannot read as csv"):
        load_trace(tmp_path / "empty.csv")


def test_rate_needs_two_distinct_times(tmp_path):
    rows = {"timestamp": [5.0], "tenant": ["a"], "prompt_len": [3], "output_len": [2]}
    load = TenantLoad("a", arrival="trace", trace_path=str(_write(tmp_path, "csv", rows)))
    with pytest.raises(ValueError, match=r"1 arrival\(s\) over 0.0 s define no rate"):
        scale_rates(WorkloadSpec((load,)), 2.0)


def test_priorities_must_name_trace_tenants(tmp_path):
    with pytest.raises(ValueError, match=r"priorities name tenant\(s\) \['7'\] not in the trace"):
        tenants_from_trace(_write(tmp_path, "csv"), priorities={"7": 1})
