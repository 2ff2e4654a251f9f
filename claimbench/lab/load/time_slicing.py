"""Time-slicing one engine between tenants: alternating windows, each serving one tenant.

The baseline co-location is measured against: the engine serves only ``order[k % n]``'s
requests in window k (every window ``window_s`` long, from the run's start). A request that
arrives outside its tenant's window waits for the next one; a request still unfinished when
its window closes is paused and resumes in its tenant's next window, with the tokens it has so
far. The pause is an abort plus a continuation request (prompt + tokens so far, the tokens it
still owes) whose full KV pages the prefix cache gives back on resumption, as KV kept resident
across the pause would; only the last partial page is recomputed (``prefix_hit_tokens`` of the
continuations says how much was reused).

Requests are logical: their pieces are stitched back into one row each (its true arrival,
first token, finish and every token time), in the columns metrics.requests_frame gives, so
goodput and latency read the same as for a co-located run.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from claimbench.engine.outputs import TokenEvent
from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.load.tenant_runs import ServedRun

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.workload.build import WorkloadRequest

PAUSE_REASON = "slice-end"


@dataclass
class _Logical:
    """One workload request and the engine requests (pieces) that served it."""

    request: WorkloadRequest
    pieces: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)  # generated so far, over every piece

    @property
    def remaining(self) -> int:
        return self.request.max_tokens - len(self.tokens)


def window_tenant(order: Sequence[str], window_s: float, elapsed_s: float) -> tuple[int, str]:
    """(window index, the tenant it serves) at ``elapsed_s`` after the run's start."""
    k = int(elapsed_s // window_s)
    return k, order[k % len(order)]


def serve_time_sliced(
    engine: LLMEngine,
    requests: list[WorkloadRequest],
    order: Sequence[str],
    window_s: float,
    timeout_s: float,
) -> ServedRun:
    """Serve ``requests`` at their arrival offsets, one tenant per window (see the module);
    the frames hold one row per workload request and this run's steps."""
    if not window_s > 0 or not order:
        raise ValueError(f"need window_s > 0 and tenants to alternate, got {window_s}, {order}")
    unknown = sorted({r.tenant for r in requests} - set(order))
    if unknown:
        raise ValueError(f"tenants {unknown} have no window in {list(order)}")
    first_step = len(engine.step_records)
    logical = [_Logical(r) for r in sorted(requests, key=lambda r: r.arrival_s)]
    queued: dict[str, deque[_Logical]] = {t: deque() for t in order}
    active: list[_Logical] = []
    tokens: dict[str, list[int]] = {}  # tokens each running piece has made so far
    finished: set[str] = set()  # pieces that finished, were rejected or aborted
    start = time.perf_counter()
    next_arrival, window, timed_out = 0, -1, False
    while next_arrival < len(logical) or active or any(queued.values()) or engine.has_unfinished:
        now = time.perf_counter()
        if now - start > timeout_s:
            timed_out = True
            for item in active:
                engine.abort(item.pieces[-1], "timeout")
            engine.step()
            break
        k, tenant = window_tenant(order, window_s, now - start)
        if k != window:
            # The closing window's unfinished requests pause, first in line for their next one.
            for item in reversed(active):
                item.tokens.extend(tokens.pop(item.pieces[-1], []))
                engine.abort(item.pieces[-1], PAUSE_REASON)
                queued[item.request.tenant].appendleft(item)
            active, window = [], k
        while (
            next_arrival < len(logical) and logical[next_arrival].request.arrival_s <= now - start
        ):
            queued[logical[next_arrival].request.tenant].append(logical[next_arrival])
            next_arrival += 1
        while queued[tenant]:
            item = queued[tenant].popleft()
            item.pieces.append(_submit(engine, item, start))
            active.append(item)
        if engine.has_unfinished:
            # Read the step's events, not engine.output(): decoding text every step would
            # charge the sliced arm host time the co-located one does not pay.
            for event in engine.step():
                if isinstance(event, TokenEvent):
                    tokens.setdefault(event.request_id, []).append(event.token_id)
                else:
                    finished.add(event.request_id)
            active = [item for item in active if item.pieces[-1] not in finished]
            continue
        wake = [start + (window + 1) * window_s]
        if next_arrival < len(logical):
            wake.append(start + logical[next_arrival].request.arrival_s)
        time.sleep(max(min(wake) - time.perf_counter(), 0.0))
    frame = stitched_frame(engine, logical)
    steps = engine.steps_frame().iloc[first_step:].reset_index(drop=True)
    return ServedRun(frame, steps, time.perf_counter() - start, timed_out)


def _submit(engine: LLMEngine, item: _Logical, start: float) -> str:
    """Queue ``item``'s next piece: its prompt and tokens so far, the tokens it still owes."""
    r = item.request
    return engine.add_request(
        [*r.prompt_token_ids, *item.tokens],
        SamplingParams(max_tokens=item.remaining, ignore_eos=True),
        r.tenant,
        r.priority,
        start + r.arrival_s,  # its true arrival: FCFS keeps its place
    )


def stitched_frame(engine: LLMEngine, logical: list[_Logical]) -> pd.DataFrame:
    """One row per workload request from its pieces' rows of ``engine.requests_frame()``:
    true arrival, first token, last finish, every token time and the TTFT/TPOT they give."""
    pieces = engine.requests_frame().set_index("request_id")
    rows = []
    for item in logical:
        if not item.pieces:
            continue  # never reached its window before a timeout
        mine = pieces.loc[item.pieces]
        times = [t for ts in mine["token_times_s"] for t in ts]
        arrival = float(mine["arrival_s"].iloc[0])
        last = mine.iloc[-1]
        n_out = len(times)
        completed = last["finish_reason"] in ("stop", "length")
        first = times[0] if times else np.nan
        ttft = first - arrival
        e2el = float(last["finish_s"]) - arrival
        rows.append(
            {
                "request_id": item.pieces[0],
                "tenant": item.request.tenant,
                "priority": item.request.priority,
                "arrival_s": arrival,
                "first_token_s": first,
                "finish_s": float(last["finish_s"]),
                "token_times_s": times,
                "prompt_tokens": item.request.prompt_len,
                "output_tokens": n_out,
                "num_pieces": len(item.pieces),
                "resumed_prefix_hit_tokens": int(mine["prefix_hit_tokens"].iloc[1:].sum()),
                "finish_reason": last["finish_reason"],
                "completed": completed,
                "ttft_s": ttft if completed else np.nan,
                "e2el_s": e2el if completed else np.nan,
                "tpot_s": (e2el - ttft) / (n_out - 1) if completed and n_out > 1 else np.nan,
            }
        )
    return pd.DataFrame(rows)
