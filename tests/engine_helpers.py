"""Shared builders for the engine tests: requests without a model, a tiny random model."""

from __future__ import annotations

import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from claimbench.engine.request import Request
from claimbench.engine.sampling_params import SamplingParams
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


@functools.cache
def tiny_model(seed: int = 0, cfg: ModelConfig = TINY_MODEL) -> LlamaForCausalLM:
    """Built once per session: tests only read it, and eager init is slow on a busy CPU."""
    return LlamaForCausalLM(cfg, dtype=jnp.float32, rngs=nnx.Rngs(seed))


def tiny_config(num_pages: int = 64, **overrides):
    """tiny_engine's EngineConfig: f32, a pool of ``num_pages`` 8-token pages, buckets
    (16, 32) x (8,)."""
    from claimbench.engine.config import EngineConfig
    from claimbench.engine.kv.kv_cache import kv_bytes_per_token

    page_size = overrides.get("page_size", 8)
    pool = num_pages * page_size * kv_bytes_per_token(TINY_MODEL, jnp.float32)
    cfg = dict(
        dtype="float32",
        kv_pool_bytes=pool,
        page_size=page_size,
        max_num_seqs=8,
        max_num_batched_tokens=32,
        max_model_len=128,
    )
    return EngineConfig(**{**cfg, **overrides})


def tiny_engine(model=None, **overrides):
    """An f32 engine over the tiny model (tiny_config's overrides)."""
    from claimbench.engine.build import build_engine

    return build_engine(tiny_config(**overrides), model=model or tiny_model())


@functools.cache
def _default_tiny_engine():
    """tiny_engine() and the config it was built with."""
    engine = tiny_engine()
    return engine, engine.config


def shared_tiny_engine(**host_options):
    """tiny_engine(), built once per process and reset on every call: no requests, no step
    records, no cached prefix, a new scheduler. ``host_options`` (config.HOST_FIELDS:
    policies, tenants, seed, prefix caching, async scheduling) hold until the next call.

    For tests that neither patch the engine nor count its compilations: the runner, with
    its compile counters and the pages earlier tests wrote (no request reads a page before
    writing it), is the same one across tests."""
    engine, config = _default_tiny_engine()
    engine.reset(dataclasses.replace(config, **host_options))
    return engine


DENSE_LEN = 128


@functools.cache
def _dense_forward(model):
    graphdef, state = nnx.split(model)
    return jax.jit(lambda ids: nnx.merge(graphdef, state).forward_dense(ids))


def dense_logits(model, token_ids):
    """Naive full forward over one sequence: f32[len, vocab]. Padded at the end to one
    length (causal attention never looks right), so it compiles once."""
    ids = np.zeros((1, DENSE_LEN), np.int32)
    ids[0, : len(token_ids)] = token_ids
    return np.asarray(_dense_forward(model)(ids)[0, : len(token_ids)])
