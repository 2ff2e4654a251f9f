"""`claimbench bench --url`: the serving benchmark driving a real server over HTTP."""

from __future__ import annotations

import json

import pytest
from server_helpers import shared_server
from typer.testing import CliRunner

from claimbench.cli.main import app
from claimbench.engine.sampling_params import SamplingParams
from claimbench.serving.clients.http_replay import replay_http
from claimbench.serving.clients.replay import WorkItem

# 8-token prompts + 4 output tokens = 12 tokens each: the 40-token bucket of tenant "tight"
# admits 3 of a burst of 6 (it refills 1 token/s, far too slow to take a 4th).
BENCH = ["bench", "--requests", "6", "--rate", "inf", "--input-len", "8", "--output-len", "4"]


@pytest.fixture(scope="module")
def server():
    return shared_server()


def bench(server, tmp_path, *args: str, keys: list[str] = ()):
    """`bench --url` with ``keys`` in an --api-key-file (keys never go on the command line)."""
    if keys:
        key_file = tmp_path / "api.keys"
        key_file.write_text("".join(k + "\n" for k in keys))
        args = ("--api-key-file", str(key_file), *args)
    args = ["--root", str(tmp_path), *BENCH, "--url", server.url, *args]
    return CliRunner().invoke(app, args)


@pytest.mark.slow
def test_bench_over_http_spreads_requests_over_tenants_and_summarizes_them(server, tmp_path):
    before = server.call("requests_per_tenant")
    keys = [f"{t}={server.keys[t]}" for t in ("alice", "bob")]
    result = bench(server, tmp_path, "--json", "--slo-ttft-ms", "60000", keys=keys)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    after = server.call("requests_per_tenant")
    # Round-robin over the two keys: 3 requests each reached the engine under its tenant.
    assert {t: after.get(t, 0) - before.get(t, 0) for t in ("alice", "bob")} == {
        "alice": 3,
        "bob": 3,
    }
    assert summary["num_completed"] == 6 and summary["total_output_tokens"] == 24
    assert summary["total_input_tokens"] == 6 * 8
    assert summary["goodput"] == pytest.approx(summary["request_throughput"])  # a loose SLO
    assert summary["p50_ttft_s"] <= summary["p50_e2el_s"]
    assert set(summary["tenants"]) == {"alice", "bob"}
    assert all(t["num_completed"] == 3 for t in summary["tenants"].values())


@pytest.mark.slow
def test_bench_over_http_counts_429s_as_rejections(server, tmp_path):
    result = bench(server, tmp_path, keys=[f"tight={server.keys['tight']}"])
    assert result.exit_code == 0, result.output
    assert "Serving Benchmark Result" in result.stdout and "Median TPOT (ms):" in result.stdout
    completed = int(_row(result.stdout, "Successful requests:"))
    rejected = int(_row(result.stdout, "Rejected requests:"))
    assert completed + rejected == 6 and completed <= 3


def test_http_replay_sees_every_token_and_the_arrival_schedule(server):
    sampling = SamplingParams(max_tokens=5, ignore_eos=True)
    items = [WorkItem(0.05 * i, (1, 5 + i, 9, 11), sampling, tenant="bob") for i in range(4)]
    run = replay_http(server.url, items, keys={"bob": server.keys["bob"]})
    frame = run.requests
    assert not run.timed_out and list(frame["finish_reason"]) == ["length"] * 4
    assert list(frame["output_tokens"]) == [5] * 4
    # Every token arrived in some chunk, in order, after the request was scheduled to go.
    for _, row in frame.iterrows():
        times = row["token_times_s"]
        assert 1 <= len(times) <= 5 and times == sorted(times)
        assert row["arrival_s"] <= row["first_token_s"] <= row["finish_s"]


@pytest.mark.slow
def test_bench_url_bad_input_is_one_line(server, tmp_path):
    (tmp_path / "k").write_text("k\n")
    args = ["--root", str(tmp_path), *BENCH, "--api-key-file", str(tmp_path / "k")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "--api-key-file needs --url" in result.stderr
    result = bench(server, tmp_path, keys=["not-a-key"])
    assert result.exit_code == 2 and "401" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def _row(table: str, label: str) -> float:
    line = next(line for line in table.splitlines() if line.startswith(label))
    return float(line[len(label) :])
