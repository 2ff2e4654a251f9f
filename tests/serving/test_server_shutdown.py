"""`claimbench serve` as a real process: single-tenant start, and SIGTERM with streams in
flight drains them to the end, ends the engine process and exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from server_helpers import free_port

from claimbench.lab.probes.processes import children
from claimbench.serving.engine_loop.batch_policy import is_batch, thread_ids

STREAMS = 4
MAX_TOKENS = 100  # about a second of decoding: still running when SIGTERM comes


def start_serve(port: int) -> subprocess.Popen:
    args = [
        "--dtype", "float32", "serve", "--port", str(port),
        "--max-model-len", "128", "--max-num-seqs", "8", "--max-num-batched-tokens", "32",
        "--kv-pool-mb", "4", "--shutdown-timeout-s", "60",
    ]  # fmt: skip
    code = "from claimbench.cli.main import app; app()"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until_live(url: str, process: subprocess.Popen, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"serve exited early: {process.communicate()[1][-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError("serve did not come up")


def engine_processes(pid: int) -> list[int]:
    """The spawned children of ``pid`` (its engine process; not multiprocessing's tracker)."""
    found = []
    for child in children(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"spawn_main" in cmdline:
            found.append(child)
    return found


@pytest.mark.slow
def test_sigterm_drains_streams_in_flight_and_exits_0():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_serve(port)
    try:
        wait_until_live(url, process)
        engines = engine_processes(process.pid)
        assert len(engines) == 1  # the engine runs in a process of its own
        # The API process yields to the engine on wake-ups (batch_policy.py); the engine
        # process, spawned before the switch, keeps the normal policy.
        if hasattr(os, "SCHED_BATCH"):
            assert all(is_batch(tid) for tid in thread_ids(process.pid))
            assert not any(is_batch(tid) for tid in thread_ids(engines[0]))
        started = threading.Barrier(STREAMS + 1, timeout=60)
        results: list[list[str]] = [[] for _ in range(STREAMS)]
        finished_at = [0.0] * STREAMS

        def stream(i: int) -> None:
            body = {
                "model": "claimbench-tiny",
                "prompt": f"def stream_{i}():\n",
                "max_tokens": MAX_TOKENS,
                "ignore_eos": True,
                "stream": True,
            }
            # No API key: without a tenants file the server is single-tenant.
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as r:
                lines = (line for line in r.iter_lines() if line)
                results[i].append(next(lines))
                started.wait()
                results[i].extend(lines)
                finished_at[i] = time.monotonic()

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(STREAMS)]
        for thread in threads:
            thread.start()
        started.wait()  # every stream has its first chunk
        process.send_signal(signal.SIGTERM)
        signalled_at = time.monotonic()
        # Admission stops at once: a new request is refused (503) or finds no listener.
        time.sleep(0.3)
        try:
            late = httpx.post(f"{url}/v1/completions", json={"model": "x", "prompt": "y"})
            assert late.status_code == 503
        except httpx.TransportError:
            pass
        for thread in threads:
            thread.join(120)
        assert process.wait(timeout=120) == 0
        assert min(finished_at) > signalled_at  # every stream was still in flight
        # The server waited for its engine process: it has ended and was reaped.
        assert not Path(f"/proc/{engines[0]}").exists()
    finally:
        if process.poll() is None:
            process.kill()
    stderr = process.stderr.read()
    assert "single-tenant" in stderr and f"engine process {engines[0]}" in stderr
    for lines in results:
        assert lines[-1] == "data: [DONE]"
        chunks = [json.loads(line[6:]) for line in lines[:-1]]
        # Drained, not cut: every stream ran to its full length.
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        assert sum(1 for c in chunks if c["choices"][0]["text"]) >= MAX_TOKENS // 2
