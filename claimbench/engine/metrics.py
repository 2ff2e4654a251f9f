"""Per-request and per-step records as DataFrames (vLLM's definitions of TTFT, E2EL, TPOT).

TTFT = first token - arrival; E2EL = finish - arrival; TPOT = (E2EL - TTFT) / (output - 1).
Summaries over these frames (percentiles, throughputs, goodput) are the harness's:
lab/metrics/serving_summary.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from claimbench.engine.request import Request


@dataclass(frozen=True)
class StepRecord:
    step: int
    start_s: float  # relative to the engine's start
    num_seqs: int
    num_decode_seqs: int
    num_prefill_seqs: int  # prefill-only and mixed chunks
    num_scheduled_tokens: int
    num_decode_tokens: int
    num_prefill_tokens: int
    token_bucket: int  # padded token count the step ran at
    seq_bucket: int
    num_padding_tokens: int
    num_preempted: int
    pages_used: int
    pages_free: int
    host_s: float  # scheduling, batch building, dispatch, postprocessing (never waiting)
    # Dispatch (or, overlapped, the previous step's end) until the outputs were seen ready:
    # overlapped and not waited for, an upper bound.
    device_s: float
    # Speculative decoding, with vLLM's names: sequences that verified a draft this step,
    # their draft tokens, how many were accepted, and per draft position how many sequences
    # accepted it (length num_spec_tokens; empty without speculation).
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: tuple[int, ...] = ()
    draft_s: float = 0.0  # proposing the next step's drafts (the draft model's steps)
    # Mixture of experts: per layer, the distinct experts this step's real tokens were routed
    # to (from the router, on device); empty for a dense model.
    experts_touched: tuple[int, ...] = ()
    # Early exit: layers each scheduled token ran (num_layers = no exit); empty when off.
    exit_layers: tuple[int, ...] = ()
    ladder_rung: int = 0  # degradation-ladder rung in force (0 = full service; ladder.py)
    host_blocked_s: float = 0.0  # the host waiting for the outputs (block_until_ready)
    overlapped: bool = False  # built while the step before ran (async scheduling)
    # Sequences that ended (a stop, an abort) before this step's outputs were read: their
    # tokens are discarded, never emitted.
    num_discarded: int = 0


def _rel(t: float | None, t0: float) -> float:
    return np.nan if t is None else t - t0


def requests_frame(requests: Iterable[Request], t0: float) -> pd.DataFrame:
    """One row per request; times in seconds since t0; NaN where an event never happened."""
    rows = []
    for r in requests:
        arrival, first = r.arrival_time - t0, _rel(r.first_token_time, t0)
        finish = _rel(r.finish_time, t0)
        n_out = r.num_output_tokens
        ttft = first - arrival
        e2el = finish - arrival
        completed = r.finish_reason in ("stop", "length")
        rows.append(
            {
                "request_id": r.request_id,
                "tenant": r.tenant,
                "priority": r.priority,
                "arrival_s": arrival,
                "first_scheduled_s": _rel(r.first_scheduled_time, t0),
                "first_token_s": first,
                "finish_s": finish,
                "token_times_s": [t - t0 for t in r.token_times],
                "prompt_tokens": r.num_prompt_tokens,
                "output_tokens": n_out,
                "num_preemptions": r.num_preemptions,
                "prefix_hit_tokens": r.prefix_hit_tokens,
                "finish_reason": r.finish_reason,
                "rejected_reason": r.rejected_reason,
                "completed": completed,
                "ttft_s": ttft if completed else np.nan,
                "e2el_s": e2el if completed else np.nan,
                "tpot_s": (e2el - ttft) / (n_out - 1) if completed and n_out > 1 else np.nan,
            }
        )
    return pd.DataFrame(rows, columns=list(rows[0]) if rows else None)


def steps_frame(steps: Iterable[StepRecord]) -> pd.DataFrame:
    return pd.DataFrame([asdict(s) for s in steps])
