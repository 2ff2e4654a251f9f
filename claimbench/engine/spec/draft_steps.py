"""The draft model's device work: a ragged catch-up step, then k - 1 decode steps in a
``lax.scan``, jitted together with the draft cache donated (``propose_steps``: one dispatch
and one host round trip for the whole proposal, where k separate steps cost k of each). A
round where no request proposes (its chunks are prefill) runs ``catch_up_step`` alone.

Draft sampling draws from the request's filtered distribution (temperature, top-k, top-p)
under the key the target's sample at the same output index uses (``_sample``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
from flax import nnx

from claimbench.engine.worker.batch import StepInputs
from claimbench.engine.worker.runner import StaticModel
from claimbench.engine.worker.sampler import SamplingBatch, sample
from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import NULL_PAGE, AttentionMetadata
from claimbench.models.llama import Rope


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class DecodeInputs:
    """The k - 1 one-token steps after the catch-up step; ``N`` = padded sequence slots."""

    first_index: jax.Array  # i32[N] each slot's row in the catch-up step's outputs
    positions: jax.Array  # i32[N] where draft token 0 goes (the request's length)
    num_active: jax.Array  # i32[N] steps that feed a token: the drafts wanted - 1
    page_indices: jax.Array  # i32[N, pages_per_seq] the draft pool's block tables
    num_seqs: jax.Array  # i32[1] real slots
    sampling: SamplingBatch  # output_index: draft token 0's index in the output


def _sample(logits: jax.Array, batch: SamplingBatch) -> jax.Array:
    """logits f32[N, V_draft] -> draft tokens i32[N]: the plain sampler's draw (sampler.sample)
    from the draft's distribution under the request's key for that output index, the key the
    target's own sample there uses. Threefry draws are prefix-consistent (a test checks), so
    each token id below V_draft gets the same Gumbel noise in both, and the draft's token is
    the target's whenever their distributions agree closely: acceptance compares tokens only
    (worker/acceptance.py), and what the draft guesses never changes what is emitted."""
    return sample(logits, batch)[0]


def _model(static: StaticModel, weights: list[jax.Array]) -> nnx.Module:
    return nnx.merge(static.graphdef, jax.tree.unflatten(static.treedef, weights))


def _catch_up(
    static: StaticModel,
    weights: list[jax.Array],
    rope: Rope,
    kv_caches: list[LayerKV],
    inputs: StepInputs,
) -> tuple[jax.Array, list[LayerKV]]:
    """One ragged draft step -> (token i32[N], cache): feeds each sequence the tokens its
    draft K/V lacks and samples draft token 0 after the last."""
    model = _model(static, weights)
    # A token past the draft's vocabulary (a target row no tokenizer id uses, drawn only by
    # a sampled or untrained target) is fed as the draft's last id: only the draft's guesses
    # can suffer, since the target verifies every one.
    token_ids = jnp.minimum(inputs.token_ids, model.cfg.vocab_size - 1)
    hidden, kv_caches = model(
        token_ids,
        inputs.positions,
        kv_caches,
        inputs.md,
        attention=static.attention,
        rope=rope,
    )
    tokens = _sample(model.logits(hidden[inputs.logits_indices[:, 0]]), inputs.sampling)
    return tokens, kv_caches


catch_up_step = jax.jit(_catch_up, static_argnums=(0,), donate_argnums=(3,))


def _decode_steps(
    static: StaticModel,
    num_spec_tokens: int,
    weights: list[jax.Array],
    rope: Rope,
    kv_caches: list[LayerKV],
    first_tokens: jax.Array,
    inputs: DecodeInputs,
) -> tuple[jax.Array, list[LayerKV]]:
    """Draft tokens 1..k-1 for every slot, on the device.

    first_tokens i32[M]: the catch-up step's outputs -> (drafts i32[N, k], cache). A slot
    stops writing K/V once its wanted drafts are fed (its later writes go to the null page;
    its later tokens are never read)."""
    model = _model(static, weights)
    page_size = kv_caches[0].pages.shape[1]
    num_slots, pages_per_seq = inputs.page_indices.shape
    is_real = jnp.arange(num_slots) < inputs.num_seqs[0]
    md_fixed = dict(
        cu_q_lens=jnp.minimum(jnp.arange(num_slots + 1), inputs.num_seqs[0]).astype(jnp.int32),
        page_indices=inputs.page_indices,
        num_seqs=inputs.num_seqs,
        # Every real slot feeds one token: all are in the decode-only group.
        distribution=jnp.full(3, inputs.num_seqs[0], jnp.int32),
    )

    def step(carry, j):
        tokens, kv = carry
        positions = inputs.positions + j - 1
        active = is_real & (j - 1 < inputs.num_active)
        page = jnp.take_along_axis(
            inputs.page_indices, jnp.minimum(positions // page_size, pages_per_seq - 1)[:, None], 1
        )[:, 0]
        slot = jnp.where(active, page * page_size + positions % page_size, NULL_PAGE * page_size)
        # An idle slot attends to its first token only: valid memory, result unused.
        kv_lens = jnp.where(active, positions + 1, jnp.where(is_real, 1, 0)).astype(jnp.int32)
        md = AttentionMetadata(slot_mapping=slot.astype(jnp.int32), kv_lens=kv_lens, **md_fixed)
        hidden, kv = model(tokens, positions, kv, md, attention=static.attention, rope=rope)
        batch = dataclasses.replace(inputs.sampling, output_index=inputs.sampling.output_index + j)
        new_tokens = _sample(model.logits(hidden), batch)
        return (new_tokens, kv), new_tokens

    tokens0 = first_tokens[inputs.first_index]
    (_, kv_caches), tokens = jax.lax.scan(
        step, (tokens0, kv_caches), jnp.arange(1, num_spec_tokens)
    )
    drafts = jnp.concatenate([tokens0[:, None], jnp.moveaxis(tokens, 0, 1)], axis=1)
    return drafts, kv_caches


@partial(jax.jit, static_argnums=(0, 1), donate_argnums=(4,))
def propose_steps(
    static: StaticModel,
    num_spec_tokens: int,
    weights: list[jax.Array],
    rope: Rope,
    kv_caches: list[LayerKV],
    catch_up: StepInputs,
    decode: DecodeInputs,
) -> tuple[jax.Array, list[LayerKV]]:
    """The catch-up step, then draft tokens 1..k-1, in one dispatch -> (drafts i32[N, k],
    cache); ``decode.first_index`` picks each slot's catch-up row."""
    tokens, kv_caches = _catch_up(static, weights, rope, kv_caches, catch_up)
    return _decode_steps(static, num_spec_tokens, weights, rope, kv_caches, tokens, decode)
