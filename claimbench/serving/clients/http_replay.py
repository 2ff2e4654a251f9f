"""Replaying a workload against a running server over HTTP: the client side of
``claimbench bench --url`` and of the tenant experiments' ``via: http``.

Each WorkItem is sent when the wall clock reaches its arrival offset, as one streamed
``/v1/completions`` request (token-id prompt, its own sampling, ``ignore_eos`` kept) with
its tenant's API key. What the client sees is timestamped on arrival of each SSE chunk, as
vLLM's benchmark client does: the first chunk with output is the first token, each chunk
after it one inter-token gap (a chunk carries every token one engine step produced), the
usage chunk the output token count; ``count_tokens`` gives each token its own time. A 429
or 400 is a rejection: the request's ``finish_reason`` is "rejected" and the server's
message its ``rejected_reason``.

The result is a requests frame with engine/metrics.requests_frame's columns, so the same
``serving_summary`` functions summarize both paths; what only the engine knows (first
scheduled, preemptions, prefix-cache hits) is NaN.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx
import numpy as np
import pandas as pd

from claimbench.serving.clients.replay import WorkItem

REJECTED_STATUSES = (400, 429)  # the server's answers for never-servable and over-limit


@dataclass(frozen=True)
class HttpRun:
    """One workload served over HTTP, as its client saw it."""

    requests: pd.DataFrame  # requests_frame columns, times in seconds since the run started
    duration_s: float  # from the run's start to the last response's end
    start_time: float  # time.perf_counter() at the run's start (the frame's zero)
    timed_out: bool  # requests still open at the timeout were cancelled


@dataclass
class _Observed:
    """One request's client-side record (perf_counter times)."""

    item: WorkItem
    index: int
    sent: float | None = None
    chunk_times: list[float] | None = None
    finish: float | None = None
    finish_reason: str | None = None
    rejected_reason: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0


def request_body(item: WorkItem, model: str, count_tokens: bool = False) -> dict:
    """The streamed /v1/completions body for ``item``; ``count_tokens`` asks for each
    token's log-prob, so every chunk says how many tokens it carries."""
    s = item.sampling
    body = {
        "model": model,
        "prompt": list(item.prompt_token_ids),
        "max_tokens": s.max_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "ignore_eos": s.ignore_eos,
        "priority": item.priority,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if count_tokens:
        body["logprobs"] = 0
    if s.seed is not None:
        body["seed"] = s.seed
    if s.stop_token_ids:
        body["stop_token_ids"] = list(s.stop_token_ids)
    return body


async def _send(
    http: httpx.AsyncClient, record: _Observed, model: str, key: str | None, count_tokens: bool
) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = request_body(record.item, model, count_tokens)
    record.chunk_times = []
    async with http.stream("POST", "/v1/completions", json=body, headers=headers) as response:
        if response.status_code in REJECTED_STATUSES:
            error = json.loads(await response.aread()).get("error", {})
            record.finish = time.perf_counter()
            record.finish_reason = "rejected"
            record.rejected_reason = str(error.get("message", response.status_code))
            record.prompt_tokens = len(record.item.prompt_token_ids)
            return
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            now = time.perf_counter()
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"the server failed mid-stream: {chunk['error']}")
            for choice in chunk.get("choices", ()):
                reason = choice.get("finish_reason")
                if choice.get("logprobs") is not None:  # asked for: one entry per token
                    record.chunk_times += [now] * len(choice["logprobs"]["tokens"])
                elif choice.get("text") or reason is None:
                    # A chunk without a finish reason is only sent when it holds tokens.
                    record.chunk_times.append(now)
                if reason is not None:
                    record.finish_reason = reason
            if chunk.get("usage"):
                record.prompt_tokens = chunk["usage"]["prompt_tokens"]
                record.output_tokens = chunk["usage"]["completion_tokens"]
        record.finish = time.perf_counter()


async def _replay(
    url: str,
    items: Sequence[WorkItem],
    keys: Mapping[str, str] | None,
    model: str | None,
    timeout_s: float,
    count_tokens: bool,
) -> tuple[list[_Observed], float, float, bool]:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
    timeout = httpx.Timeout(timeout_s, connect=30.0)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as http:
        if model is None:
            key = next(iter(keys.values()), None) if keys else None
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            listed = (await http.get("/v1/models", headers=headers)).raise_for_status()
            model = listed.json()["data"][0]["id"]
        records = [_Observed(item, i) for i, item in enumerate(items)]
        start = time.perf_counter()

        async def at_arrival(record: _Observed) -> None:
            await asyncio.sleep(max(start + record.item.arrival_offset_s - time.perf_counter(), 0))
            record.sent = time.perf_counter()
            key = keys[record.item.tenant] if keys is not None else None
            await _send(http, record, model, key, count_tokens)

        tasks = [asyncio.ensure_future(at_arrival(r)) for r in records]
        done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()  # closing the stream makes the server abort the request
        if pending:
            await asyncio.wait(pending)
        for task in done:
            task.result()  # a transport error or a 5xx is the run's failure, not a datum
        end = time.perf_counter()
    return records, start, end, bool(pending)


def replay_http(
    url: str,
    items: Sequence[WorkItem],
    *,
    keys: Mapping[str, str] | None = None,
    model: str | None = None,
    timeout_s: float = 600.0,
    count_tokens: bool = False,
) -> HttpRun:
    """Send ``items`` to the server at ``url`` at their arrival offsets; wait for all.

    ``keys`` maps each item's tenant to its API key (None: a server without keys); ``model``
    defaults to the server's first listed model. Requests still open at ``timeout_s`` are
    cancelled and reported with finish_reason "timeout". ``count_tokens``: one token time
    per token (each token's log-prob is asked for, which costs the server a detokenization
    per token) instead of one per chunk, vLLM's client's view. ValueError for a tenant without a
    key; httpx errors for a server that cannot be reached or fails a request.
    """
    if keys is not None:
        missing = sorted({item.tenant for item in items} - set(keys))
        if missing:
            raise ValueError(f"no API key for tenant(s) {missing}")
    records, start, end, timed_out = asyncio.run(
        _replay(url, items, keys, model, timeout_s, count_tokens)
    )
    return HttpRun(_frame(records, start, end), end - start, start, timed_out)


def _frame(records: list[_Observed], t0: float, end: float) -> pd.DataFrame:
    """engine/metrics.requests_frame's columns from the client's records; a request cut off
    by the timeout finishes at ``end``."""
    rows = []
    for r in records:

        def rel(t: float | None) -> float:
            return np.nan if t is None else t - t0

        times = r.chunk_times or []
        reason = r.finish_reason if r.finish is not None else "timeout"
        completed = reason in ("stop", "length")
        arrival = r.item.arrival_offset_s  # the scheduled time, as vLLM's client counts
        first = rel(times[0]) if times else np.nan
        e2el = rel(r.finish) - arrival
        n_out = r.output_tokens
        rows.append(
            {
                "request_id": f"http-{r.index}",
                "tenant": r.item.tenant,
                "priority": r.item.priority,
                "arrival_s": arrival,
                "first_scheduled_s": np.nan,
                "first_token_s": first,
                "finish_s": rel(r.finish if r.finish is not None else end),
                "token_times_s": [t - t0 for t in times],
                "prompt_tokens": r.prompt_tokens or len(r.item.prompt_token_ids),
                "output_tokens": n_out,
                "num_preemptions": np.nan,
                "prefix_hit_tokens": np.nan,
                "finish_reason": reason,
                "rejected_reason": r.rejected_reason,
                "completed": completed,
                "ttft_s": first - arrival if completed else np.nan,
                "e2el_s": e2el if completed else np.nan,
                "tpot_s": (e2el - (first - arrival)) / (n_out - 1)
                if completed and n_out > 1
                else np.nan,
            }
        )
    return pd.DataFrame(rows)
