"""The draft-model proposer: a small model with its own paged KV pool guesses k tokens.

Per request the draft keeps the K/V of a prefix of the request's tokens. Each round it first
catches up (prefill chunks alongside the target's, or the one or two tokens a verification
added), which samples draft token 0, then runs k - 1 one-token steps. A verification keeps
the draft's K/V only up to the last verified token (``_rollback``): the positions after it
held rejected draft tokens and are simply overwritten next round.

The k steps are ordinary jitted steps (one host round trip each), not one lax.scan.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from claimbench.engine.batch import StepInputs, empty_inputs
from claimbench.engine.buckets import pick_pair
from claimbench.engine.config import EngineConfig
from claimbench.engine.kv_cache import allocate_kv_cache, resolve_kv_dtype
from claimbench.engine.request import Request
from claimbench.engine.runner import StaticModel
from claimbench.engine.sampler import MIN_TEMPERATURE, filtered_probs, greedy_tokens
from claimbench.kernels.backend import get_backend, resolve_backend_name
from claimbench.kernels.kv_quant import LayerKV
from claimbench.models.config import ModelConfig
from claimbench.models.llama import LlamaForCausalLM, Rope, rope_table
from claimbench.models.tokenizer import Tokenizer

DRAFT_STREAM = 2  # random stream of draft sampling under a token's key (spec_decode.py)


@partial(jax.jit, static_argnums=(0,), donate_argnums=(3,))
def _draft_step(
    static: StaticModel,
    weights: list[jax.Array],
    rope: Rope,
    kv_caches: list[LayerKV],
    inputs: StepInputs,
) -> tuple[jax.Array, jax.Array, list[LayerKV]]:
    """One draft step -> (token i32[N], the distribution it was drawn from f32[N, V], cache).

    A greedy batch returns zeros for the distribution: its acceptance never reads it."""
    model = nnx.merge(static.graphdef, jax.tree.unflatten(static.treedef, weights))
    hidden, kv_caches = model(
        inputs.token_ids,
        inputs.positions,
        kv_caches,
        inputs.md,
        attention=static.attention,
        rope=rope,
    )
    logits = model.logits(hidden[inputs.logits_indices[:, 0]])
    batch = inputs.sampling

    def sampled() -> tuple[jax.Array, jax.Array]:
        probs = filtered_probs(logits, batch)
        keys = jax.vmap(
            lambda s, i: jax.random.fold_in(jax.random.fold_in(jax.random.key(s), i), DRAFT_STREAM)
        )(batch.seeds, batch.output_index)
        tokens = jax.vmap(jax.random.categorical)(keys, jnp.log(probs)).astype(jnp.int32)
        return jnp.where(batch.temperature < MIN_TEMPERATURE, greedy_tokens(logits), tokens), probs

    tokens, probs = jax.lax.cond(
        batch.all_greedy, lambda: (greedy_tokens(logits), jnp.zeros_like(logits)), sampled
    )
    return tokens, probs, kv_caches


@dataclass
class _DraftSeq:
    """One request as the draft's pool holds it."""

    block_table: list[int]  # draft pool pages, in token order
    num_computed: int  # leading tokens of the request whose draft K/V is written
    num_preemptions: int  # the request's count when this state began (a change resets it)


def check_draft(
    draft: ModelConfig,
    target: ModelConfig,
    draft_tokenizer: Tokenizer | None,
    tokenizer: Tokenizer | None,
) -> None:
    """ValueError naming the mismatch when a draft cannot propose for the target: its token
    ids must mean the same tokens (vocabulary size, and the tokenizers' vocabularies)."""
    if draft.vocab_size != target.vocab_size:
        raise ValueError(
            f"draft model's vocabulary ({draft.vocab_size}) differs from the target's "
            f"({target.vocab_size})"
        )
    both = draft_tokenizer is not None and tokenizer is not None
    if both and draft_tokenizer.tokenizer.get_vocab() != tokenizer.tokenizer.get_vocab():
        raise ValueError("draft model's tokenizer differs from the target's")


def load_draft_model(
    path: Path | None, dtype: str, target: ModelConfig, tokenizer: Tokenizer | None
) -> LlamaForCausalLM:
    """The draft at ``path`` (None = the shipped claimbench-tiny-draft), checked against the
    target (``check_draft``)."""
    from claimbench.models.checkpoint import default_draft_path, load_model, read_config

    path = Path(path) if path is not None else default_draft_path()
    draft_tokenizer = Tokenizer.from_dir(path) if (path / "tokenizer.json").is_file() else None
    check_draft(read_config(path), target, draft_tokenizer, tokenizer)
    model, _ = load_model(path, dtype)
    return model


class DraftProposer:
    """Owns the draft model, its KV pool and per-request draft state."""

    def __init__(self, cfg: EngineConfig, model: LlamaForCausalLM) -> None:
        self.cfg = cfg
        graphdef, state = nnx.split(model)
        self.weights, treedef = jax.tree.flatten(state)
        self._static = StaticModel(graphdef, treedef, get_backend(cfg.attention_backend))
        # Room for every running sequence at full length, so the draft never runs short.
        self.num_pages = 1 + cfg.max_num_seqs * cfg.pages_per_seq
        self.kv_caches = allocate_kv_cache(
            model.cfg,
            self.num_pages,
            cfg.page_size,
            resolve_kv_dtype("auto", model.dtype),
            bit_containers=resolve_backend_name(cfg.attention_backend) != "pallas",
        )
        self.rope = jax.device_put(rope_table(model.cfg, cfg.max_model_len))
        self.reset()

    def reset(self) -> None:
        """Forget every request (the pool's contents are simply overwritten later)."""
        self._free_pages = list(range(self.num_pages - 1, 0, -1))  # page 0 is the null page
        self._seqs: dict[str, _DraftSeq] = {}

    def free(self, request: Request) -> None:
        """Drop a finished or preempted request's draft pages."""
        seq = self._seqs.pop(request.request_id, None)
        if seq is not None:
            self._free_pages.extend(seq.block_table)

    def propose(
        self, requests: list[Request]
    ) -> tuple[dict[str, list[int]], dict[str, int], jax.Array | None]:
        """Catch the draft up on every running request and propose for the caught-up ones.

        -> (draft tokens by request id; each proposer's row in the distributions; the
        distributions f32[num_proposing, k, V] the draft tokens were drawn from, or None
        when every proposing request is greedy)."""
        budget = self.cfg.max_num_batched_tokens
        chunks: list[tuple[Request, _DraftSeq, list[int]]] = []  # (request, state, tokens)
        wants: dict[str, int] = {}  # draft tokens each proposing request asks for
        for request in requests:
            seq = self._state(request)
            caught_up = request.num_uncomputed_tokens == 1
            # Never more drafts than outputs left after the step's own token.
            num_wanted = min(
                self.cfg.num_spec_tokens,
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
            return {}, {}, None
        tokens, probs = self._run(chunks)
        proposing = [r for r, _, _ in chunks if r.request_id in wants]
        row = {r.request_id: i for i, (r, _, _) in enumerate(chunks)}
        drafts = {r.request_id: [tokens[row[r.request_id]]] for r in proposing}
        greedy = all(r.sampling.greedy for r in proposing)
        dists = [] if greedy else [_rows(probs, [row[r.request_id] for r in proposing])]
        for j in range(1, self.cfg.num_spec_tokens):
            step = [r for r in proposing if wants[r.request_id] > j]
            if not step:
                break
            states = [self._seqs[r.request_id] for r in step]
            chunk = [(r, s, drafts[r.request_id][-1:]) for r, s in zip(step, states, strict=True)]
            tokens, probs = self._run(chunk, first_output=j)
            for r, token in zip(step, tokens, strict=True):
                drafts[r.request_id].append(token)
            if not greedy:
                # Requests that asked for fewer drafts read row 0 here: never accepted past
                # their own num_draft, so never read.
                at = {r.request_id: i for i, r in enumerate(step)}
                dists.append(_rows(probs, [at.get(r.request_id, 0) for r in proposing]))
        rows_of = {r.request_id: i for i, r in enumerate(proposing)}
        if greedy or not proposing:
            return drafts, rows_of, None
        k = self.cfg.num_spec_tokens
        dists += [jnp.zeros_like(dists[0])] * (k - len(dists))
        return drafts, rows_of, jnp.stack(dists, axis=1)

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
        needed = -(-num_tokens // self.cfg.page_size) - len(seq.block_table)
        for _ in range(max(needed, 0)):
            seq.block_table.append(self._free_pages.pop())

    def _run(
        self, chunks: list[tuple[Request, _DraftSeq, list[int]]], first_output: int = 0
    ) -> tuple[list[int], jax.Array]:
        """One draft step over (request, state, tokens to feed) chunks -> (each chunk's sampled
        token, the distributions f32[len(chunks), V] in chunk order). Single-token chunks
        take the first slots: the attention kernels' decode group."""
        cfg, page_size = self.cfg, self.cfg.page_size
        total = sum(len(t) for _, _, t in chunks)
        token_bucket, seq_bucket = pick_pair(cfg, total, len(chunks))
        inputs = empty_inputs(cfg, token_bucket, seq_bucket)
        md, sp = inputs.md, inputs.sampling
        order = sorted(range(len(chunks)), key=lambda i: len(chunks[i][2]) > 1)
        offset = 0
        for slot, i in enumerate(order):
            request, seq, tokens = chunks[i]
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
            sp.temperature[slot] = request.sampling.temperature
            sp.top_k[slot] = request.sampling.top_k
            sp.top_p[slot] = request.sampling.top_p
            sp.seeds[slot] = request.seed
            sp.output_index[slot] = request.num_output_tokens + first_output
            seq.num_computed += n
            offset += n
        md.cu_q_lens[len(chunks) + 1 :] = offset
        md.num_seqs[0] = len(chunks)
        num_single = sum(1 for _, _, t in chunks if len(t) == 1)
        md.distribution[:] = (num_single, num_single, len(chunks))
        greedy = np.asarray(all(r.sampling.greedy for r, _, _ in chunks))
        inputs = dataclasses.replace(inputs, sampling=dataclasses.replace(sp, all_greedy=greedy))
        tokens, probs, self.kv_caches = _draft_step(
            self._static, self.weights, self.rope, self.kv_caches, inputs
        )
        slot_of = np.empty(len(chunks), np.int64)
        slot_of[order] = np.arange(len(chunks))
        host = np.asarray(tokens)
        return [int(host[s]) for s in slot_of], _rows(probs, slot_of.tolist())


def _rows(probs: jax.Array, rows: list[int]) -> jax.Array:
    """probs f32[N, V] -> f32[len(rows), V], gathered on the device."""
    return jnp.take(probs, jnp.asarray(rows, jnp.int32), axis=0)
