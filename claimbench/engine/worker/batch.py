"""The flattened step batch: scheduler output -> padded host arrays for the jitted step.

Sequences are laid out decode-only first (one token each), then prefill-only (chunks
starting at position 0), then mixed (chunks continuing a cached prefix), the order
AttentionMetadata.distribution describes. Token and sequence counts are padded to a
compiled bucket; padded tokens write into the null page and padded sequence slots
have kv_len 0.

With speculation a caught-up sequence also carries its draft tokens (a verify chunk of
1 + k tokens, laid out with the mixed group) and asks for logits at its last real token and
after each draft token: ``logits_indices`` is i32[N, 1 + k], a shorter row repeating its
last index.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from claimbench.engine.config import EngineConfig
from claimbench.engine.request import Request
from claimbench.engine.worker.buckets import pick_pair
from claimbench.engine.worker.sampler import SamplingBatch
from claimbench.kernels.metadata import NULL_PAGE, AttentionMetadata


class StepInputError(ValueError):
    """A request's values do not fit the step's arrays (an int past int32, a seed past
    uint32): that request cannot run, the others can. SamplingParams bounds every value, so
    this is the second line, for a request built around it."""

    def __init__(self, request_ids: list[str], reason: str) -> None:
        super().__init__(f"requests {request_ids} cannot run: {reason}")
        self.request_ids = request_ids
        self.reason = reason


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class StepInputs:
    """Everything the device step reads. ``T`` = token bucket, ``N`` = sequence bucket."""

    token_ids: np.ndarray  # i32[T]
    positions: np.ndarray  # i32[T]
    md: AttentionMetadata
    logits_indices: np.ndarray  # i32[N, 1 + k] flat indices of the tokens sampled after
    sampling: SamplingBatch
    target_ids: np.ndarray  # i32[T] the prompt token following each position (prompt logprobs)
    draft_tokens: np.ndarray  # i32[N, k] proposed tokens being verified (k = spec_tokens)
    num_draft: np.ndarray  # i32[N] how many of each row's draft tokens are real


@dataclass(frozen=True)
class StepPlan:
    """A built step: the inputs plus the host-side map from slots back to requests."""

    inputs: StepInputs
    requests: list[Request]  # slot order
    num_tokens: list[int]  # scheduled tokens per slot, draft tokens included
    num_draft: list[int]  # draft tokens per slot (the tail of its scheduled tokens)
    num_decode: int
    num_prefill: int  # prefill-only sequences (chunk starts at position 0)
    num_mixed: int
    token_bucket: int
    seq_bucket: int
    wants_prompt_logprobs: bool

    @property
    def num_scheduled_tokens(self) -> int:
        return sum(self.num_tokens)


def empty_inputs(cfg: EngineConfig, num_tokens: int, num_seqs: int) -> StepInputs:
    """All-padding inputs of one bucket's shapes (for compiling ahead of serving)."""
    i32 = np.int32
    k = cfg.spec_tokens
    md = AttentionMetadata(
        slot_mapping=np.zeros(num_tokens, i32),
        cu_q_lens=np.zeros(num_seqs + 1, i32),
        kv_lens=np.zeros(num_seqs, i32),
        page_indices=np.full((num_seqs, cfg.pages_per_seq), NULL_PAGE, i32),
        num_seqs=np.zeros(1, i32),
        distribution=np.zeros(3, i32),
    )
    sampling = SamplingBatch(
        temperature=np.zeros(num_seqs, np.float32),
        top_k=np.zeros(num_seqs, i32),
        top_p=np.ones(num_seqs, np.float32),
        seeds=np.zeros(num_seqs, np.uint32),
        output_index=np.zeros(num_seqs, i32),
        all_greedy=np.asarray(True),
    )
    return StepInputs(
        token_ids=np.zeros(num_tokens, i32),
        positions=np.zeros(num_tokens, i32),
        md=md,
        logits_indices=np.zeros((num_seqs, 1 + k), i32),
        sampling=sampling,
        target_ids=np.zeros(num_tokens, i32),
        draft_tokens=np.zeros((num_seqs, k), i32),
        num_draft=np.zeros(num_seqs, i32),
    )


def _segments(lengths: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """For items laid out back to back in segments of ``lengths``: each item's segment and
    its index within it (i32 arrays of sum(lengths))."""
    length = np.asarray(lengths, np.int32)
    row = np.repeat(np.arange(len(lengths), dtype=np.int32), length)
    first = np.cumsum(length, dtype=np.int32) - length
    return row, np.arange(len(row), dtype=np.int32) - first[row]


def build_step(cfg: EngineConfig, scheduled: list[tuple[Request, int]]) -> StepPlan:
    """Flatten (request, num_tokens) pairs into one padded batch; tokens beyond a request's
    uncomputed ones are its draft tokens (``request.spec_token_ids``).

    One pass over the requests gathers plain Python lists; the per-token arrays (positions,
    slot mapping, page tables) are then filled with whole-array operations, so the host's
    cost per step stays small beside the device's even with many decode sequences.

    StepInputError, naming the requests, when a request's values overflow the arrays: the
    check runs only once numpy refused a value, so a normal step pays nothing for it."""
    try:
        return _build_step(cfg, scheduled)
    except (OverflowError, ValueError) as e:
        bad = [r.request_id for r, _ in scheduled if _out_of_range(r)]
        if not bad:
            raise
        raise StepInputError(bad, str(e)) from e


def _out_of_range(request: Request) -> bool:
    """Whether a value of ``request`` cannot be held by the step's int32 / uint32 arrays."""
    params = request.sampling
    ints = (params.top_k, request.num_output_tokens, *request.prompt_token_ids)
    return not (
        all(0 <= v < 2**31 for v in ints)
        and all(0 <= v < 2**31 for v in request.output_token_ids)
        and 0 <= request.seed < 2**32
    )


def _build_step(cfg: EngineConfig, scheduled: list[tuple[Request, int]]) -> StepPlan:
    decode: list[tuple[Request, int]] = []
    prefill: list[tuple[Request, int]] = []
    mixed: list[tuple[Request, int]] = []
    for request, n in scheduled:
        if n == 1:
            decode.append((request, n))
        elif request.num_computed_tokens == 0:
            prefill.append((request, n))
        else:
            mixed.append((request, n))
    ordered = decode + prefill + mixed
    num_seqs = len(ordered)
    total = sum(n for _, n in ordered)
    token_bucket, seq_bucket = pick_pair(cfg, total, num_seqs)
    inputs = empty_inputs(cfg, token_bucket, seq_bucket)
    md, sp = inputs.md, inputs.sampling
    starts, counts, num_drafts, tokens, tables, table_lens = [], [], [], [], [], []
    temperature, top_k, top_p, seeds, output_index = [], [], [], [], []
    wants_prompt_logprobs = False
    all_greedy = True
    offset = 0
    for i, (request, n) in enumerate(ordered):
        start = request.num_computed_tokens
        end = start + n
        num_spec = max(n - request.num_uncomputed_tokens, 0)
        starts.append(start)
        counts.append(n)
        num_drafts.append(num_spec)
        tokens += request.token_ids(start, end - num_spec)
        if num_spec:
            spec = request.spec_token_ids[:num_spec]
            tokens += spec
            inputs.draft_tokens[i, :num_spec] = spec
        tables += request.block_table
        table_lens.append(len(request.block_table))
        params = request.sampling
        temperature.append(params.temperature)
        top_k.append(params.top_k)
        top_p.append(params.top_p)
        seeds.append(request.seed)
        output_index.append(request.num_output_tokens)
        all_greedy = all_greedy and params.greedy
        if params.prompt_logprobs and start + 1 < request.num_prompt_tokens:
            wants_prompt_logprobs = True
            targets = request.token_ids(start + 1, min(end + 1, request.num_prompt_tokens))
            inputs.target_ids[offset : offset + len(targets)] = targets
        offset += n
    i32 = np.int32
    count = np.asarray(counts, i32)
    start = np.asarray(starts, i32)
    num_spec = np.asarray(num_drafts, i32)
    cu = np.cumsum(count, dtype=i32)
    # Page tables: row i holds request i's pages from column 0.
    md.page_indices[_segments(table_lens)] = tables
    # Each token's slot, position and cache slot.
    row, index = _segments(counts)
    positions = start[row] + index
    page_size = cfg.cache.page_size
    inputs.token_ids[:total] = tokens
    inputs.positions[:total] = positions
    md.slot_mapping[:total] = (
        md.page_indices[row, positions // page_size] * page_size + positions % page_size
    )
    md.kv_lens[:num_seqs] = start + count
    md.cu_q_lens[1 : num_seqs + 1] = cu
    md.cu_q_lens[num_seqs + 1 :] = total
    md.num_seqs[0] = num_seqs
    md.distribution[:] = (len(decode), len(decode) + len(prefill), num_seqs)
    inputs.num_draft[:num_seqs] = num_spec
    # The last real token, then each draft token: position j predicts output j.
    last_real = cu - 1 - num_spec
    inputs.logits_indices[:num_seqs] = last_real[:, None] + np.minimum(
        np.arange(1 + cfg.spec_tokens, dtype=i32), num_spec[:, None]
    )
    sp.temperature[:num_seqs] = temperature
    sp.top_k[:num_seqs] = top_k
    sp.top_p[:num_seqs] = top_p
    sp.seeds[:num_seqs] = seeds
    sp.output_index[:num_seqs] = output_index
    inputs = StepInputs(
        inputs.token_ids,
        inputs.positions,
        md,
        inputs.logits_indices,
        SamplingBatch(
            sp.temperature, sp.top_k, sp.top_p, sp.seeds, sp.output_index, np.asarray(all_greedy)
        ),
        inputs.target_ids,
        inputs.draft_tokens,
        inputs.num_draft,
    )
    return StepPlan(
        inputs=inputs,
        requests=[r for r, _ in ordered],
        num_tokens=[n for _, n in ordered],
        num_draft=num_drafts,
        num_decode=len(decode),
        num_prefill=len(prefill),
        num_mixed=len(mixed),
        token_bucket=token_bucket,
        seq_bucket=seq_bucket,
        wants_prompt_logprobs=wants_prompt_logprobs,
    )
