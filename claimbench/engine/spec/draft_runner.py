"""The draft-model proposer: a small model with its own paged KV pool guesses k tokens.

Per request the draft keeps the K/V of a prefix of the request's tokens. Each round it first
catches up (prefill chunks alongside the target's, or the one or two tokens a verification
added), which samples draft token 0, then runs k - 1 one-token steps. A verification keeps
the draft's K/V only up to the last verified token (``_state``): the positions after it
held rejected draft tokens and are simply overwritten next round.

The device work is draft_steps.py: a ragged catch-up step, then the other k - 1 draft steps
in a lax.scan, one jitted dispatch and one host round trip for the whole proposal.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import numpy as np
from flax import nnx

from claimbench.engine.config import EngineConfig
from claimbench.engine.kv.kv_cache import allocate_kv_cache, page_layout, resolve_kv_dtype
from claimbench.engine.request import Request
from claimbench.engine.spec.draft_steps import DecodeInputs, catch_up_step, propose_steps
from claimbench.engine.worker.batch import StepInputs, empty_inputs
from claimbench.engine.worker.buckets import bucket_pairs, pick_bucket, pick_pair, seq_buckets
from claimbench.engine.worker.runner import StaticModel
from claimbench.engine.worker.sampler import SamplingBatch
from claimbench.kernels.backend import get_backend, resolve_backend_name
from claimbench.kernels.metadata import NULL_PAGE
from claimbench.models.llama import LlamaForCausalLM, rope_table


@dataclass
class _DraftSeq:
    """One request as the draft's pool holds it."""

    block_table: list[int]  # draft pool pages, in token order
    num_computed: int  # leading tokens of the request whose draft K/V is written
    num_preemptions: int  # the request's count when this state began (a change resets it)


class DraftProposer:
    """Owns the draft model, its KV pool and per-request draft state."""

    def __init__(self, cfg: EngineConfig, model: LlamaForCausalLM) -> None:
        self.cfg = cfg
        graphdef, state = nnx.split(model)
        self.weights, treedef = jax.tree.flatten(state)
        # Its catch-up chunks (the one or two tokens a verification added) are short too.
        attention = get_backend(
            cfg.model.attention_backend, verify_width=1 + cfg.spec.num_spec_tokens
        )
        self._static = StaticModel(graphdef, treedef, attention)
        # Room for every running sequence at full length, so the draft never runs short.
        self.num_pages = 1 + cfg.scheduler.max_num_seqs * cfg.pages_per_seq
        backend = resolve_backend_name(cfg.model.attention_backend)
        self.kv_caches = allocate_kv_cache(
            page_layout(model.cfg, backend),  # as the target's: the same kernel reads both
            self.num_pages,
            cfg.cache.page_size,
            resolve_kv_dtype("auto", model.dtype),
            attention_backend=backend,
        )
        self.rope = jax.device_put(rope_table(model.cfg, cfg.scheduler.max_model_len))
        self.reset()

    def reset(self) -> None:
        """Forget every request (the pool's contents are simply overwritten later)."""
        self._free_pages = list(range(self.num_pages - 1, 0, -1))  # page 0 is the null page
        self._seqs: dict[str, _DraftSeq] = {}

    def precompile(self) -> tuple[int, float]:
        """Run all-padding draft steps at every bucket (their writes land in the null page),
        so proposing never compiles. Returns (variants run, seconds)."""
        start = time.perf_counter()
        num = 0
        for num_tokens, num_seqs in bucket_pairs(self.cfg):
            inputs = empty_inputs(self.cfg, num_tokens, num_seqs)
            _, self.kv_caches = catch_up_step(
                self._static, self.weights, self.rope, self.kv_caches, inputs
            )
            num += 1
            for num_slots in seq_buckets(self.cfg):
                if num_slots > num_seqs:
                    continue  # the proposers are among the catch-up step's sequences
                _, self.kv_caches = propose_steps(
                    self._static,
                    self.cfg.spec.num_spec_tokens,
                    self.weights,
                    self.rope,
                    self.kv_caches,
                    inputs,
                    self._decode_inputs([], num_slots),
                )
                num += 1
        jax.block_until_ready(self.kv_caches)
        return num, time.perf_counter() - start

    def free(self, request: Request) -> None:
        """Drop a finished or preempted request's draft pages."""
        seq = self._seqs.pop(request.request_id, None)
        if seq is not None:
            self._free_pages.extend(seq.block_table)

    def propose(self, requests: list[Request]) -> dict[str, list[int]]:
        """Catch the draft up on every running request and propose for the caught-up ones:
        the draft tokens by request id."""
        budget = self.cfg.scheduler.max_num_batched_tokens
        chunks: list[tuple[Request, _DraftSeq, list[int]]] = []  # (request, state, tokens)
        wants: dict[str, int] = {}  # draft tokens each proposing request asks for
        for request in requests:
            seq = self._state(request)
            caught_up = request.num_uncomputed_tokens == 1
            # Never more drafts than outputs left after the step's own token.
            num_wanted = min(
                self.cfg.spec.num_spec_tokens,
                request.sampling.max_tokens - request.num_output_tokens - 1,
            )
            if caught_up and num_wanted <= 0:
                continue  # its next step is its last: nothing to propose
            goal = request.num_tokens if caught_up else request.num_computed_tokens
            n = min(goal - seq.num_computed, budget)
            if n <= 0:
                continue
            budget -= n
            chunks.append((request, seq, request.token_ids(seq.num_computed, seq.num_computed + n)))
            proposes = caught_up and seq.num_computed + n == goal
            if proposes:
                wants[request.request_id] = num_wanted
            # Draft token j >= 1 is sampled after feeding token j - 1 at position goal + j - 1.
            self._grow(seq, seq.num_computed + n + (num_wanted - 1 if proposes else 0))
        if not chunks:
            return {}
        catch_up, slot_of = self._catch_up_inputs(chunks)
        proposing = [(r, s) for r, s, _ in chunks if r.request_id in wants]
        if not proposing:
            _, self.kv_caches = catch_up_step(
                self._static, self.weights, self.rope, self.kv_caches, catch_up
            )
            return {}
        num_slots = pick_bucket(seq_buckets(self.cfg), len(proposing))
        inputs = self._decode_inputs(
            proposing, num_slots, [slot_of[r.request_id] for r, _ in proposing]
        )
        drafts, self.kv_caches = propose_steps(
            self._static,
            self.cfg.spec.num_spec_tokens,
            self.weights,
            self.rope,
            self.kv_caches,
            catch_up,
            inputs,
        )
        drafts = np.asarray(drafts)
        out: dict[str, list[int]] = {}
        for i, (request, seq) in enumerate(proposing):
            num = wants[request.request_id]
            out[request.request_id] = drafts[i, :num].tolist()
            seq.num_computed += num - 1  # draft tokens 0..num-2 were fed
        return out

    def _state(self, request: Request) -> _DraftSeq:
        """The request's draft state, rolled back to its verified tokens."""
        seq = self._seqs.get(request.request_id)
        if seq is not None and seq.num_preemptions != request.num_preemptions:
            self.free(request)
            seq = None
        if seq is None:
            seq = self._seqs[request.request_id] = _DraftSeq([], 0, request.num_preemptions)
        # Draft K/V past the last verified token belongs to rejected (or unscheduled) drafts.
        seq.num_computed = min(seq.num_computed, request.num_tokens - 1)
        return seq

    def _grow(self, seq: _DraftSeq, num_tokens: int) -> None:
        needed = -(-num_tokens // self.cfg.cache.page_size) - len(seq.block_table)
        for _ in range(max(needed, 0)):
            seq.block_table.append(self._free_pages.pop())

    def _catch_up_inputs(
        self, chunks: list[tuple[Request, _DraftSeq, list[int]]]
    ) -> tuple[StepInputs, dict[str, int]]:
        """The ragged step's inputs over (request, state, tokens to feed) chunks, and each
        request's slot. Single-token chunks take the first slots: the attention kernels'
        decode group."""
        cfg, page_size = self.cfg, self.cfg.cache.page_size
        total = sum(len(t) for _, _, t in chunks)
        token_bucket, seq_bucket = pick_pair(cfg, total, len(chunks))
        inputs = empty_inputs(cfg, token_bucket, seq_bucket)
        md, sp = inputs.md, inputs.sampling
        ordered = sorted(chunks, key=lambda c: len(c[2]) > 1)
        offset = 0
        for slot, (request, seq, tokens) in enumerate(ordered):
            n, start = len(tokens), seq.num_computed
            positions = np.arange(start, start + n, dtype=np.int32)
            md.page_indices[slot, : len(seq.block_table)] = seq.block_table
            inputs.token_ids[offset : offset + n] = tokens
            inputs.positions[offset : offset + n] = positions
            md.slot_mapping[offset : offset + n] = (
                md.page_indices[slot, positions // page_size] * page_size + positions % page_size
            )
            md.kv_lens[slot] = start + n
            md.cu_q_lens[slot + 1] = offset + n
            inputs.logits_indices[slot, 0] = offset + n - 1
            _set_sampling(sp, slot, request)
            seq.num_computed += n
            offset += n
        md.cu_q_lens[len(chunks) + 1 :] = offset
        md.num_seqs[0] = len(chunks)
        num_single = sum(1 for _, _, t in chunks if len(t) == 1)
        md.distribution[:] = (num_single, num_single, len(chunks))
        greedy = np.asarray(all(r.sampling.greedy for r, _, _ in chunks))
        inputs = dataclasses.replace(inputs, sampling=dataclasses.replace(sp, all_greedy=greedy))
        return inputs, {r.request_id: slot for slot, (r, _, _) in enumerate(ordered)}

    def _decode_inputs(
        self,
        proposing: list[tuple[Request, _DraftSeq]],
        num_slots: int,
        first_index: Sequence[int] = (),
    ) -> DecodeInputs:
        """The scan's inputs for the proposing requests, padded to num_slots slots."""
        cfg = self.cfg
        sp = empty_inputs(cfg, num_slots, num_slots).sampling
        inputs = DecodeInputs(
            first_index=np.zeros(num_slots, np.int32),
            positions=np.zeros(num_slots, np.int32),
            num_active=np.zeros(num_slots, np.int32),
            page_indices=np.full((num_slots, cfg.pages_per_seq), NULL_PAGE, np.int32),
            num_seqs=np.asarray([len(proposing)], np.int32),
            sampling=sp,
        )
        for slot, (request, seq) in enumerate(proposing):
            inputs.first_index[slot] = first_index[slot]
            inputs.positions[slot] = request.num_tokens
            num_wanted = min(
                cfg.spec.num_spec_tokens,
                request.sampling.max_tokens - request.num_output_tokens - 1,
            )
            inputs.num_active[slot] = num_wanted - 1
            inputs.page_indices[slot, : len(seq.block_table)] = seq.block_table
            _set_sampling(sp, slot, request)
        greedy = np.asarray(all(r.sampling.greedy for r, _ in proposing))
        return dataclasses.replace(inputs, sampling=dataclasses.replace(sp, all_greedy=greedy))


def _set_sampling(sp: SamplingBatch, slot: int, request: Request) -> None:
    """Fill one slot of a host SamplingBatch; draft token 0 is output index num_output."""
    sp.temperature[slot] = request.sampling.temperature
    sp.top_k[slot] = request.sampling.top_k
    sp.top_p[slot] = request.sampling.top_p
    sp.seeds[slot] = request.seed
    sp.output_index[slot] = request.num_output_tokens
