"""Serving a tenant experiment's workload through the OpenAI-compatible server (``via:
http``), so a claim is checked end to end: HTTP, API keys, the server's admission answers.

The experiment's own engine is wrapped in a server for the run (one API key per tenant,
tenant settings from the engine's config), built as `claimbench serve` builds its own
(``build_server_state``: the same engine loop and messages, the loop on a thread over this
engine rather than in a process), started on a free loopback port in a thread of this
process, warmed up by one request, emptied, driven by ``serving.clients.http_replay`` at the
workload's arrival times, and shut down again; the engine then carries on in process for
the next arm.

The requests frame is the client's view (arrival to first chunk, to last chunk; 429s as
rejections), put on the engine's clock (seconds since ``engine.start_time``, like the steps
frame) and completed by what only the engine knows: when a request was first scheduled,
its preemptions and prefix-cache hits, matched by tenant and prompt.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections import defaultdict

import numpy as np
import pandas as pd

from claimbench.engine.engine import LLMEngine
from claimbench.engine.sampling_params import SamplingParams
from claimbench.models.checkpoint import default_model_path
from claimbench.serving.api.state import PrefixSharing
from claimbench.serving.clients.http_replay import replay_http
from claimbench.serving.clients.replay import WorkItem, as_work_items
from claimbench.serving.server import (
    GracefulServer,
    ServeOptions,
    build_server_state,
    make_server,
)
from claimbench.serving.tenants import TenantKeys, hash_key, new_key
from claimbench.workload.build import WorkloadRequest

# The engine's prefix-caching mode -> the server's sharing rule with the same effect.
SHARING = {
    "off": PrefixSharing.off,
    "per-tenant": PrefixSharing.per_tenant,
    "shared": PrefixSharing.shared,
    "salted": PrefixSharing.shared,  # workload requests carry no salt: all may share
}
ENGINE_ONLY = ("first_scheduled_s", "num_preemptions", "prefix_hit_tokens")
START_TIMEOUT_S = 60.0


def serve_http_frames(
    engine: LLMEngine,
    requests: list[WorkloadRequest],
    timeout_s: float,
    sampling: SamplingParams,
) -> tuple[pd.DataFrame, pd.DataFrame, float, bool]:
    """Serve ``requests`` on ``engine`` through a server started for the run.

    Returns (requests frame, steps frame of this run, duration_s, timed_out). The engine is
    reset under its own config with the prefix-caching mode the server needs, and is left
    idle (its loop stopped) afterwards.
    """
    sharing = SHARING[engine.config.cache.prefix_caching]
    cache = dataclasses.replace(engine.config.cache, prefix_caching=sharing.engine_mode)
    engine.reset(dataclasses.replace(engine.config, cache=cache))
    config = engine.config
    tenants = sorted({r.tenant for r in requests})
    keys = {t: new_key() for t in tenants}
    table = TenantKeys(list(config.scheduler.tenants), {hash_key(k): t for t, k in keys.items()})
    model_dir = config.model.model_path or default_model_path()
    options = ServeOptions(
        model_dir,
        config,
        prefix_sharing=sharing,
        port=_free_port(),
        precompile=False,
        log_level="warning",
        keep_finished_requests=len(requests),
    )
    state, _ = build_server_state(options, engine=engine, tenants=table)
    server = make_server(state, options)
    thread = threading.Thread(target=server.run, name="claimbench-http-run", daemon=True)
    thread.start()
    try:
        _wait_started(server, thread)
        url = f"http://127.0.0.1:{options.port}"
        # One request through the whole stack first, so the run does not pay for first use
        # (connections, lazily built handlers); then the engine starts afresh on its thread.
        first = requests[0]
        warm = WorkItem(
            0.0, tuple(first.prompt_token_ids), SamplingParams(max_tokens=1), first.tenant
        )
        replay_http(url, [warm], keys=keys, model=model_dir.name, timeout_s=timeout_s)
        state.engine.reset()
        run = replay_http(
            url,
            as_work_items(requests, sampling),
            keys=keys,
            model=model_dir.name,
            timeout_s=timeout_s,
            count_tokens=True,  # token_times_s: one per token, as the engine path has
        )
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT_S)
    frame = _on_engine_clock(run.requests, run.start_time - engine.start_time)
    frame = _with_engine_columns(frame, engine, requests)
    return frame, engine.steps_frame(), run.duration_s, run.timed_out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_started(server: GracefulServer, thread: threading.Thread) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the in-process server did not start")
        time.sleep(0.01)


def _on_engine_clock(frame: pd.DataFrame, offset_s: float) -> pd.DataFrame:
    """The client's times (seconds since its start) as seconds since the engine's start."""
    frame = frame.copy()
    for column in ("arrival_s", "first_token_s", "finish_s"):
        frame[column] = frame[column] + offset_s
    frame["token_times_s"] = [[t + offset_s for t in times] for times in frame["token_times_s"]]
    return frame


def _with_engine_columns(
    frame: pd.DataFrame, engine: LLMEngine, requests: list[WorkloadRequest]
) -> pd.DataFrame:
    """``frame`` with ENGINE_ONLY columns from the engine's own record of each request,
    matched by (tenant, prompt): the i-th such request the client sent is the i-th the
    engine saw. Rejected requests keep NaN for what the engine never did."""
    engine_frame = engine.requests_frame().set_index("request_id")
    seen: dict[tuple, list[str]] = defaultdict(list)
    for request_id, request in engine.requests.items():
        seen[(request.tenant, tuple(request.prompt_token_ids))].append(request_id)
    frame = frame.copy()
    for column in ENGINE_ONLY:
        frame[column] = np.nan
    for i, r in enumerate(requests):
        ids = seen.get((r.tenant, tuple(r.prompt_token_ids)))
        if ids:
            row = engine_frame.loc[ids.pop(0)]
            for column in ENGINE_ONLY:
                frame.loc[i, column] = row[column]
    return frame
