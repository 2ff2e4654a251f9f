"""The draft model's step of a speculative engine, compiled for a TPU chip ahead of time.

A speculative engine with a draft model keeps a second model and a second KV pool on the
chip beside the target's (engine/spec/draft_runner.py): the draft's weights, a pool with room for
every sequence slot at max_model_len, and its own jitted step, the catch-up step and the
k - 1 draft steps in one dispatch (draft_steps.propose_steps). This compiles that step at
the engine's largest bucket, as tpu_check compiles the target's, so the two can be summed.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np

from claimbench.engine.config import EngineConfig
from claimbench.engine.kv.kv_cache import page_layout, pool_bytes, resolve_kv_dtype
from claimbench.engine.spec.draft_steps import DecodeInputs, propose_steps
from claimbench.engine.worker.batch import empty_inputs
from claimbench.engine.worker.buckets import bucket_pairs, seq_buckets
from claimbench.hardware.chips import get_chip
from claimbench.kernels.metadata import NULL_PAGE
from claimbench.models.config import ModelConfig
from claimbench.tpucompile.check import BucketReport, _inspect, one_line_error, tpu_devices
from claimbench.tpucompile.target import build_target


def draft_pool_bytes(draft_cfg: ModelConfig, engine_cfg: EngineConfig) -> int:
    """The draft's pool as DraftProposer allocates it: every sequence slot at max_model_len
    and the null page, in the compute dtype, laid out for the Pallas kernel."""
    num_pages = 1 + engine_cfg.scheduler.max_num_seqs * engine_cfg.pages_per_seq
    storage = resolve_kv_dtype("auto", engine_cfg.model.dtype)
    return pool_bytes(
        page_layout(draft_cfg, "pallas"), storage, engine_cfg.cache.page_size, num_pages
    )


def check_draft_step(
    chip: str,
    draft_cfg: ModelConfig,
    engine_cfg: EngineConfig,
    devices: list[jax.Device] | None = None,
) -> BucketReport:
    """The draft's propose step compiled for ``chip`` at ``engine_cfg``'s largest bucket,
    with the draft's weights (unquantized, in the engine's dtype) and its own pool."""
    devices = devices or tpu_devices(chip, 1)
    draft_engine = dataclasses.replace(
        engine_cfg,
        weights="bf16",
        kv_dtype="auto",
        kv_pool_bytes=draft_pool_bytes(draft_cfg, engine_cfg),
    )
    target = build_target(chip, draft_cfg, draft_engine, devices)
    num_tokens, num_seqs = bucket_pairs(engine_cfg)[-1]
    num_slots = max(s for s in seq_buckets(engine_cfg) if s <= num_seqs)
    inputs = jax.tree.map(target.placed, empty_inputs(engine_cfg, num_tokens, num_seqs))
    decode = DecodeInputs(
        first_index=np.zeros(num_slots, np.int32),
        positions=np.zeros(num_slots, np.int32),
        num_active=np.zeros(num_slots, np.int32),
        page_indices=np.full((num_slots, engine_cfg.pages_per_seq), NULL_PAGE, np.int32),
        num_seqs=np.zeros(1, np.int32),
        sampling=empty_inputs(engine_cfg, num_slots, num_slots).sampling,
    )
    decode = jax.tree.map(target.placed, decode)
    base = dict(
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        weight_bytes=target.weight_bytes,
        kv_pool_bytes=target.kv_pool_bytes,
        hbm_bytes=int(get_chip(chip).hbm_bytes),
    )
    start = time.perf_counter()
    try:
        with jax.default_device(target.device):
            lowered = propose_steps.lower(
                target.static,
                engine_cfg.spec.num_spec_tokens,
                target.weights,
                target.rope,
                target.caches,
                inputs,
                decode,
            )
            compiled = lowered.compile()
    except Exception as err:  # noqa: BLE001 - any compiler failure is the finding
        return BucketReport(
            error=one_line_error(err), compile_s=time.perf_counter() - start, **base
        )
    return _inspect(compiled, time.perf_counter() - start, target.cache_shapes, base)
