"""A Mixtral-style mixture-of-experts decoder in Flax NNX (MixtralForCausalLM).

Attention, norms, embeddings and the serving / dense entry points are the Llama model's
(models/llama.py); each layer's MLP is a sparse MoE block instead: a linear router scores
every expert, softmax in f32, the top-k are kept and renormalised to sum to one (Mixtral),
and each token's output is the weighted sum of its k experts' SwiGLU MLPs.

Dispatch is dropless: every (token, expert) assignment is computed, none is dropped for
capacity. The assignments are sorted by expert so each expert's rows are contiguous, one
grouped matmul per projection (``jax.lax.ragged_dot``, group sizes = tokens per expert)
runs all experts at once, and the rows are unsorted and summed with their routing weights.
On a TPU ragged_dot is a grouped matmul over the real rows; XLA:CPU expands it into every
group against every row, so training on CPU uses ``dispatch="dense"`` instead (every
expert on every token, weighted by the sparse routing matrix): the same function, cheaper
there.

Each MoE block sows two values as ``nnx.Intermediate`` per call: ``experts_touched`` (how
many distinct experts the real tokens were routed to, i32) and ``balance_loss`` (Mixtral's
load-balancing loss over the real tokens, f32). ``with_router_stats`` collects them, so the
engine records experts touched per step from the router on device and training adds the
loss, without changing the model's call signature.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
from flax import nnx

from claimbench.models.config import ModelConfig
from claimbench.models.llama import (
    INIT_STD,
    Attention,
    DecoderLayer,
    Embedding,
    LlamaForCausalLM,
    RMSNorm,
    _linear,
)

Dispatch = Literal["ragged", "dense"]
R = TypeVar("R")
EXPERT_WEIGHTS = ("w1", "w2", "w3")  # gate [d, f], down [f, d], up [d, f]: Mixtral's names


class Routing(NamedTuple):
    """The router's decision for T tokens."""

    logits: jax.Array  # f32[T, E] router scores
    weights: jax.Array  # f32[T, k] renormalised weights of the chosen experts
    experts: jax.Array  # i32[T, k] the chosen experts, best first


def route(logits: jax.Array, top_k: int) -> Routing:
    """Mixtral's router on f[T, E] scores: softmax (f32), top-k, renormalise."""
    logits = logits.astype(jnp.float32)
    probs = jax.nn.softmax(logits, axis=-1)
    weights, experts = jax.lax.top_k(probs, top_k)
    return Routing(logits, weights / weights.sum(-1, keepdims=True), experts.astype(jnp.int32))


def experts_touched(experts: jax.Array, valid: jax.Array, num_experts: int) -> jax.Array:
    """i32 scalar: distinct experts the valid tokens of experts i32[T, k] are routed to."""
    hits = jnp.zeros(num_experts, jnp.int32).at[experts].max(valid[:, None].astype(jnp.int32))
    return hits.sum()


def balance_loss(routing: Routing, valid: jax.Array, num_experts: int) -> jax.Array:
    """Mixtral's load-balancing loss (Switch Transformer eq. 4 over top-k), f32 scalar.

    E * sum_e (fraction of assignments to e) * (mean router probability of e), over valid
    tokens: 1 when routing is uniform, up to E when every token picks the same experts.
    """
    mask = valid.astype(jnp.float32)[:, None]  # [T, 1]
    num_valid = jnp.maximum(mask.sum(), 1.0)
    chosen = jax.nn.one_hot(routing.experts, num_experts).sum(1)  # [T, E]
    k = routing.experts.shape[1]
    tokens_per_expert = (chosen * mask).sum(0) / (num_valid * k)
    probs = jax.nn.softmax(routing.logits, axis=-1)
    prob_per_expert = (probs * mask).sum(0) / num_valid
    return num_experts * jnp.sum(tokens_per_expert * prob_per_expert)


def _swiglu_ragged(xs: jax.Array, w1, w2, w3, group_sizes: jax.Array) -> jax.Array:
    """Rows f[R, d] sorted by expert, group_sizes i32[E] -> each row through its expert."""
    gate = jax.lax.ragged_dot(xs, w1, group_sizes)
    up = jax.lax.ragged_dot(xs, w3, group_sizes)
    return jax.lax.ragged_dot(jax.nn.silu(gate) * up, w2, group_sizes)


class Experts(nnx.Module):
    """E SwiGLU MLPs as stacked matrices: w1, w3 [E, hidden, f]; w2 [E, f, hidden]."""

    def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs) -> None:
        e, d, f = cfg.num_experts, cfg.hidden_size, cfg.intermediate_size
        init = nnx.initializers.normal(INIT_STD)
        self.w1 = nnx.Param(init(rngs.params(), (e, d, f), dtype))
        self.w2 = nnx.Param(init(rngs.params(), (e, f, d), dtype))
        self.w3 = nnx.Param(init(rngs.params(), (e, d, f), dtype))

    def ragged(self, x: jax.Array, routing: Routing) -> jax.Array:
        """Dropless grouped dispatch: x f[T, d] -> f[T, d]."""
        num_tokens, top_k = routing.experts.shape
        flat_experts = routing.experts.reshape(-1)  # [T * k], token-major
        order = jnp.argsort(flat_experts, stable=True)  # assignments grouped by expert
        group_sizes = jnp.bincount(flat_experts, length=self.w1.shape[0]).astype(jnp.int32)
        rows = _swiglu_ragged(
            x[order // top_k], self.w1[...], self.w2[...], self.w3[...], group_sizes
        )
        # Unsort: row j of the sorted output belongs to assignment order[j].
        out = jnp.zeros_like(rows).at[order].set(rows).reshape(num_tokens, top_k, -1)
        # Weighted in f32 and cast per assignment before the sum, as transformers does.
        return (out * routing.weights[..., None]).astype(x.dtype).sum(1)

    def dense(self, x: jax.Array, routing: Routing) -> jax.Array:
        """Every expert on every token, combined by the sparse weights: x f[T, d] -> f[T, d]."""
        num_experts = self.w1.shape[0]
        combine = (jax.nn.one_hot(routing.experts, num_experts) * routing.weights[..., None]).sum(1)
        gate = jnp.einsum("td,edf->etf", x, self.w1[...])
        up = jnp.einsum("td,edf->etf", x, self.w3[...])
        out = jnp.einsum("etf,efd->etd", jax.nn.silu(gate) * up, self.w2[...])
        return jnp.einsum("etd,te->td", out, combine.astype(x.dtype))


class SparseMoeBlock(nnx.Module):
    """Router + experts (Mixtral's block_sparse_moe)."""

    def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs, dispatch: Dispatch) -> None:
        self.gate = _linear(cfg.hidden_size, cfg.num_experts, bias=False, dtype=dtype, rngs=rngs)
        self.experts = Experts(cfg, dtype=dtype, rngs=rngs)
        self.num_experts, self.top_k = cfg.num_experts, cfg.num_experts_per_tok
        self.dispatch = dispatch

    def __call__(self, x: jax.Array, valid: jax.Array) -> jax.Array:
        """x f[..., hidden], valid b[...] (False = padding) -> f[..., hidden]."""
        lead = x.shape[:-1]
        flat, flat_valid = x.reshape(-1, x.shape[-1]), valid.reshape(-1)
        routing = route(self.gate(flat), self.top_k)
        self.sow(
            nnx.Intermediate,
            "experts_touched",
            experts_touched(routing.experts, flat_valid, self.num_experts),
        )
        self.sow(
            nnx.Intermediate, "balance_loss", balance_loss(routing, flat_valid, self.num_experts)
        )
        run = self.experts.ragged if self.dispatch == "ragged" else self.experts.dense
        return run(flat, routing).reshape(*lead, -1)


class MoeDecoderLayer(DecoderLayer):
    """A Llama decoder layer whose MLP is a sparse MoE block."""

    def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs, dispatch: Dispatch) -> None:
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype)
        self.self_attn = Attention(cfg, dtype=dtype, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype)
        self.block_sparse_moe = SparseMoeBlock(cfg, dtype=dtype, rngs=rngs, dispatch=dispatch)

    def __call__(self, x, positions, cache, md, attention):
        h, cache = self.self_attn(self.input_layernorm(x), positions, cache, md, attention)
        x = x + h
        # Padded token slots sit after the real ones: cu_q_lens[num_seqs] real tokens.
        valid = jnp.arange(x.shape[0]) < md.cu_q_lens[md.num_seqs[0]]
        return x + self.block_sparse_moe(self.post_attention_layernorm(x), valid), cache

    def dense(self, x, positions, valid):
        x = x + self.self_attn.dense(self.input_layernorm(x), positions, valid)
        if valid is None:
            valid = jnp.ones(x.shape[:-1], bool)
        return x + self.block_sparse_moe(self.post_attention_layernorm(x), valid)


class MixtralForCausalLM(LlamaForCausalLM):
    """Mixtral decoder: the Llama model's entry points over MoE layers (a drop-in for the
    engine). ``dispatch``: "ragged" (grouped matmul; serving) or "dense" (CPU training)."""

    def __init__(
        self,
        cfg: ModelConfig,
        *,
        dtype=jnp.bfloat16,
        rngs: nnx.Rngs,
        dispatch: Dispatch = "ragged",
    ) -> None:
        if not cfg.is_moe:
            raise ValueError(f"{cfg.architecture} config has no experts")
        self.cfg = cfg
        self.dtype = jnp.dtype(dtype)
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, dtype=dtype, rngs=rngs)
        self.layers = nnx.List(
            [
                MoeDecoderLayer(cfg, dtype=dtype, rngs=rngs, dispatch=dispatch)
                for _ in range(cfg.num_layers)
            ]
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype=dtype)
        self.lm_head = (
            None
            if cfg.tie_word_embeddings
            else _linear(
                cfg.hidden_size,
                cfg.vocab_size,
                bias=False,
                dtype=dtype,
                rngs=rngs,
                out_dtype=jnp.float32,
            )
        )


def build_model(cfg: ModelConfig, *, dtype, rngs: nnx.Rngs) -> LlamaForCausalLM:
    """The model class ``cfg`` describes: Mixtral for an MoE config, else Llama / Qwen2."""
    if cfg.is_moe:
        return MixtralForCausalLM(cfg, dtype=dtype, rngs=rngs)
    return LlamaForCausalLM(cfg, dtype=dtype, rngs=rngs)


class RouterStats(NamedTuple):
    """What the MoE blocks sowed in one call (empty arrays for a dense model)."""

    experts_touched: jax.Array  # i32[num_layers] distinct experts the real tokens used
    balance_loss: jax.Array  # f32[num_layers] load-balancing loss per layer


def with_router_stats(method: Callable[..., R], *args: Any, **kwargs: Any) -> tuple[R, RouterStats]:
    """Call a model's bound ``method`` and return its result with what its MoE blocks sowed
    (``nnx.capture``), in layer order; works inside jit and under grad."""
    result, sown = nnx.capture(method, nnx.Intermediate)(*args, **kwargs)
    values: dict[str, list[jax.Array]] = {"experts_touched": [], "balance_loss": []}
    for path, value in nnx.to_flat_state(sown):
        name = next(str(p) for p in reversed(path) if p in values)
        values[name].extend(jnp.atleast_1d(v) for v in jax.tree.leaves(value))
    touched, loss = values["experts_touched"], values["balance_loss"]
    return result, RouterStats(
        jnp.concatenate(touched) if touched else jnp.zeros((0,), jnp.int32),
        jnp.concatenate(loss) if loss else jnp.zeros((0,), jnp.float32),
    )


_EXPERT_PATH = re.compile(r"^model\.layers\.(\d+)\.block_sparse_moe\.experts\.(w[123])$")


def expert_tensor_names(name: str, num_experts: int) -> list[str] | None:
    """A stacked expert matrix's name (``model.layers.3.block_sparse_moe.experts.w1``) -> the
    checkpoint's per-expert tensors (``...experts.{j}.w1.weight``, each [out, in]), or None."""
    match = _EXPERT_PATH.match(name)
    if match is None:
        return None
    layer, weight = match.groups()
    prefix = f"model.layers.{layer}.block_sparse_moe.experts"
    return [f"{prefix}.{j}.{weight}.weight" for j in range(num_experts)]
