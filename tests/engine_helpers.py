"""Shared builders for the engine tests: requests without a model, a tiny random model."""

from __future__ import annotations

import itertools

import jax.numpy as jnp
from flax import nnx

from claimbench.engine.request import Request
from claimbench.engine.sampler import SamplingParams
from claimbench.models.config import ModelConfig
from claimbench.models.llama import LlamaForCausalLM

_ids = itertools.count()

TINY_MODEL = ModelConfig(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    max_position_embeddings=512,
    bos_token_id=1,
    eos_token_id=2,
)


def make_request(
    num_prompt: int,
    max_tokens: int = 8,
    *,
    tenant: str = "default",
    arrival: float | None = None,
    **sampling,
) -> Request:
    n = next(_ids)
    return Request(
        f"r{n}",
        n,
        list(range(3, 3 + num_prompt)),
        SamplingParams(max_tokens=max_tokens, **sampling),
        seed=n,
        tenant=tenant,
        priority=0,
        arrival_time=float(n) if arrival is None else arrival,
    )


def tiny_model(seed: int = 0, cfg: ModelConfig = TINY_MODEL) -> LlamaForCausalLM:
    return LlamaForCausalLM(cfg, dtype=jnp.float32, rngs=nnx.Rngs(seed))
