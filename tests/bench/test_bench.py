"""bench.serving, called directly: the options' checks, the workload, a run on an engine and over
HTTP, and what the result prints and saves."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from engine_helpers import shared_tiny_engine

from claimbench.bench.serving import (
    BenchResult,
    BenchWorkload,
    bench_engine,
    bench_engine_config,
    bench_http,
    check_options,
    tenant_keys,
)
from claimbench.engine.sampling_params import SamplingParams
from claimbench.models.checkpoint import default_model_path
from claimbench.models.tokenizer import Tokenizer
from claimbench.serving.clients.replay import WorkItem


def workload(**changes) -> BenchWorkload:
    base = dict(
        requests=8, input_len=20, output_len=4, range_ratio=0.5, rate=50.0, burstiness=1.0, seed=3
    )
    return BenchWorkload(**(base | changes))


def test_options_are_checked_in_order_and_slos_become_seconds() -> None:
    target = check_options(workload(), 1.0, (200.0, None, 1500.0), ["alice=a", "b"], "http://h")
    assert target.slos == {"slo_ttft_s": 0.2, "slo_tpot_s": None, "slo_e2el_s": 1.5}
    assert target.keys == {"alice": "a", "key2": "b"}
    bad = [
        ((workload(requests=0), 1.0, (None,) * 3, [], None), "--requests >= 1"),
        ((workload(rate=0.0), 0.0, (None,) * 3, [], None), "--rate and --burstiness"),
        ((workload(), 0.0, (-1.0, None, None), [], None), "--kv-pool-mb must be a number > 0"),
        ((workload(), 1.0, (-1.0, None, None), [], None), "got -1.0, None, None"),
        ((workload(), 1.0, (None,) * 3, ["k"], None), "--api-key-file needs --url"),
        ((workload(), 1.0, (None,) * 3, ["k"], "h:1"), "--url must start with http://"),
    ]
    for args, message in bad:
        with pytest.raises(ValueError, match=message):
            check_options(*args)


def test_tenant_keys_each_tenant_once() -> None:
    assert tenant_keys(["x", "bob=y", "z"]) == {"key1": "x", "bob": "y", "key3": "z"}
    for given in (["bob=1", "bob=2"], ["=k"], ["bob="]):
        with pytest.raises(ValueError, match="want KEY or TENANT=KEY"):
            tenant_keys(given)


@pytest.mark.slow
def test_the_workload_fits_the_model_and_is_seeded() -> None:
    w = workload()
    assert w.prompt_lengths == (10, 30) and w.max_model_len == 34
    w.check_positions(34)
    with pytest.raises(ValueError, match="exceed the model's 33 positions"):
        w.check_positions(33)
    config = bench_engine_config(Path("m"), "float32", w, 2.0, max_num_seqs=4)
    sched = config.scheduler
    assert (config.cache.kv_pool_bytes, sched.max_model_len, sched.max_num_seqs) == (
        2 * 2**20,
        34,
        4,
    )
    tokenizer = Tokenizer.from_dir(default_model_path())
    items = w.items(tokenizer)
    assert len(items) == 8 and all(10 <= len(i.prompt_token_ids) <= 30 for i in items)
    assert [i.arrival_offset_s for i in items] == sorted(i.arrival_offset_s for i in items)
    assert items == w.items(tokenizer)  # the same seed, the same requests
    at_once = workload(rate=math.inf).items(tokenizer)
    assert {i.arrival_offset_s for i in at_once} == {0.0}


def frames(tenants: list[str]) -> pd.DataFrame:
    n = len(tenants)
    return pd.DataFrame({"tenant": tenants, "num": range(n)})


def result(tenants: list[str], host_share: float | None = None) -> BenchResult:
    summary = {"num_completed": 2.0, "prefix_hit_rate": math.nan}
    if host_share is not None:
        summary["host_share_pct"] = host_share
    by_tenant = pd.DataFrame({"num_completed": [1.0] * len(tenants)}, index=tenants)
    return BenchResult(summary, frames(tenants), None, by_tenant)


@pytest.mark.slow
def test_the_report_lists_tenants_only_when_several(tmp_path: Path) -> None:
    one = result(["default"], host_share=12.34)
    assert one.to_json(tmp_path) == {
        "num_completed": 2.0,
        "prefix_hit_rate": None,  # NaN is null in JSON
        "host_share_pct": 12.34,
        "records": str(tmp_path),
    }
    assert one.where(tmp_path) == f"host share of step time 12.3% · records in {tmp_path}"
    two = result(["a", "b"])
    assert set(two.to_json(tmp_path)["tenants"]) == {"a", "b"}
    assert two.where(tmp_path) == f"records in {tmp_path}"
    two.save(tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["requests.parquet"]


@pytest.mark.slow
def test_bench_engine_serves_every_request_and_counts_them_finished(tmp_path: Path) -> None:
    engine = shared_tiny_engine()
    params = SamplingParams(max_tokens=3, ignore_eos=True)
    items = [WorkItem(0.01 * i, tuple(range(3, 3 + 5 + i)), params) for i in range(5)]
    finished: list[int] = []
    slos = {"slo_ttft_s": None, "slo_tpot_s": None, "slo_e2el_s": None}
    done = bench_engine(engine, items, 60.0, slos, finished.append)
    assert sum(finished) == 5  # the progress bar reaches the end
    assert done.summary["num_completed"] == 5 and done.summary["timed_out"] == 0.0
    assert done.summary["total_output_tokens"] == 15
    assert 0 < done.summary["host_share_pct"] < 100
    assert list(done.by_tenant.index) == ["default"]
    done.save(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"requests.parquet", "steps.parquet"}


@pytest.mark.slow
def test_bench_http_spreads_requests_round_robin_over_tenants() -> None:
    from server_helpers import shared_server

    server = shared_server()
    params = SamplingParams(max_tokens=2, ignore_eos=True)
    items = [WorkItem(0.0, (1, 40, 41, 42), params) for _ in range(4)]
    keys = {t: server.keys[t] for t in ("alice", "bob")}
    slos = {"slo_ttft_s": None, "slo_tpot_s": None, "slo_e2el_s": None}
    done = bench_http(server.url + "/", items, keys, None, 120.0, slos)
    assert done.requests["tenant"].tolist() == ["alice", "bob", "alice", "bob"]
    assert done.steps is None and math.isnan(done.summary["prefix_hit_rate"])
    assert sorted(done.by_tenant.index) == ["alice", "bob"]
