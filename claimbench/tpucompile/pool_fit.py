"""A KV pool sized from the chip's HBM, as vLLM's ``gpu_memory_utilization`` sizes its cache.

An engine given ``hbm_utilization`` (a fraction of one chip's HBM) instead of
``kv_pool_bytes`` gets the pool that fills what is left of that fraction once everything
else the step keeps in HBM is counted: the weights, the step's other inputs, its
temporaries and its code, measured by compiling the engine's own step at its largest
bucket with a one-sequence pool (tpu_check.check, on the run's chip or, ahead of time, on a
described one). The pool is capped at what the engine can use (every sequence slot at
max_model_len: a larger one would only hold pages no request can reach), and one that
cannot hold a single max_model_len sequence does not fit.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

HBM_UTILIZATION = "hbm_utilization"  # the engine option, beside EngineConfig's own


@dataclass(frozen=True)
class PoolFit:
    """One pool sized against one chip. Bytes are one chip's."""

    hbm_bytes: int  # the chip's HBM
    utilization: float  # the fraction of it the engine may fill
    resident_bytes: int  # all but the pool: weights, step inputs, temporaries, code
    min_bytes: int  # a pool that holds one max_model_len sequence (and the null page)
    need_bytes: int  # a pool that holds every sequence slot at max_model_len
    pool_bytes: int  # the pool chosen: min(need, what the fraction leaves), 0 if negative

    @property
    def free_bytes(self) -> int:
        """What the fraction leaves beside everything resident (negative: over already)."""
        return int(self.hbm_bytes * self.utilization) - self.resident_bytes

    @property
    def fits(self) -> bool:
        return self.pool_bytes >= self.min_bytes

    def describe(self) -> str:
        """One line: the pool chosen and what it was sized from."""
        gb = 1e9
        head = (
            f"KV pool {self.pool_bytes / gb:.2f} GB"
            if self.fits
            else f"does not fit HBM: a one-sequence KV pool needs {self.min_bytes / gb:.2f} GB"
        )
        return (
            f"{head} ({self.utilization:.0%} of {self.hbm_bytes / gb:.1f} GB HBM, "
            f"{self.resident_bytes / gb:.2f} GB weights and step resident, "
            f"{self.free_bytes / gb:.2f} GB left, {self.need_bytes / gb:.2f} GB would hold "
            f"every sequence)"
        )


def fit_pool(
    hbm_bytes: int, utilization: float, resident_bytes: int, min_bytes: int, need_bytes: int
) -> PoolFit:
    """The pool ``utilization`` of ``hbm_bytes`` leaves beside ``resident_bytes``, capped at
    ``need_bytes``; ValueError (one line) for a utilization outside (0, 1]."""
    check_utilization(utilization)
    if not 0 < min_bytes <= need_bytes:
        raise ValueError(f"pool bounds must satisfy 0 < {min_bytes} <= {need_bytes}")
    free = int(hbm_bytes * utilization) - resident_bytes
    pool = max(0, min(need_bytes, free))
    return PoolFit(int(hbm_bytes), utilization, resident_bytes, min_bytes, need_bytes, pool)


def check_utilization(utilization: Any) -> float:
    if isinstance(utilization, bool) or not isinstance(utilization, int | float):
        raise ValueError(f"{HBM_UTILIZATION} must be a number in (0, 1], got {utilization!r}")
    if not 0 < utilization <= 1:
        raise ValueError(f"{HBM_UTILIZATION} must be in (0, 1], got {utilization}")
    return float(utilization)


def pool_bounds(model_cfg: Any, engine_cfg: Any) -> tuple[int, int]:
    """(min_bytes, need_bytes) of ``engine_cfg``'s pool for ``model_cfg`` on a TPU (the
    pages as the Pallas kernel lays them out): one max_model_len sequence, and every
    sequence slot at max_model_len, each with the null page."""
    from claimbench.engine.kv.kv_cache import page_layout, pool_bytes, resolve_kv_dtype

    if engine_cfg.parallel.tp != 1:
        raise ValueError(
            f"{HBM_UTILIZATION} sizes one chip's pool: tp must be 1, got {engine_cfg.parallel.tp}"
        )
    layout = page_layout(model_cfg, "pallas")
    storage = resolve_kv_dtype(engine_cfg.cache.kv_dtype, engine_cfg.model.dtype)
    per_seq = engine_cfg.pages_per_seq

    def size(num_seqs: int) -> int:
        return pool_bytes(layout, storage, engine_cfg.cache.page_size, 1 + num_seqs * per_seq)

    return size(1), size(engine_cfg.scheduler.max_num_seqs)


def size_pool(
    chip: str,
    model_cfg: Any,
    engine_cfg: Any,
    utilization: float,
    *,
    devices: list[Any] | None = None,
    hbm_bytes: int | None = None,
    in_use_bytes: int = 0,
) -> PoolFit:
    """The pool ``engine_cfg`` gets on ``chip`` at ``utilization`` (its kv_pool_bytes is
    ignored): resident bytes measured by compiling its step at the largest bucket with a
    one-sequence pool, on ``devices`` (default: the described chip's). ``hbm_bytes``
    defaults to the chip's spec; ``in_use_bytes`` (already held on the chip) count as
    resident. ValueError (one line) when the step does not compile."""
    from claimbench.hardware.chips import get_chip

    utilization = check_utilization(utilization)
    min_bytes, need_bytes = pool_bounds(model_cfg, engine_cfg)
    probe = dataclasses.replace(engine_cfg, kv_pool_bytes=min_bytes)
    step_bytes = _step_bytes(chip, model_cfg, probe, tuple(devices) if devices else None)
    hbm = int(hbm_bytes if hbm_bytes is not None else get_chip(chip).hbm_bytes)
    return fit_pool(hbm, utilization, step_bytes + in_use_bytes, min_bytes, need_bytes)


@functools.lru_cache(maxsize=64)
def _step_bytes(chip: str, model_cfg: Any, probe: Any, devices: tuple[Any, ...] | None) -> int:
    """What the probe's compiled step keeps in HBM besides its pool, once per process for
    the same chip, model, config and devices (a compile of the whole step, the same bytes
    every time: several engines and claims of a run share a configuration)."""
    from claimbench.engine.worker.buckets import bucket_pairs
    from claimbench.tpucompile.check import check

    buckets = [bucket_pairs(probe)[-1]]
    devices_list = list(devices) if devices else None
    report = check(chip, model_cfg, probe, model_name="", buckets=buckets, devices=devices_list)
    (bucket,) = report.buckets
    if bucket.total_bytes == 0:  # no executable to measure: the compile failed
        raise ValueError(bucket.error)
    return bucket.total_bytes - bucket.kv_pool_bytes


def run_pool(model_cfg: Any, engine_cfg: Any, utilization: float, hardware: dict) -> PoolFit:
    """The pool an engine of this run gets: sized on the run's first TPU chip, against its
    HBM as the runtime reports it (``bytes_limit``), with what the chip already holds
    (another engine, arrays) counted as resident. ValueError (one line) off a TPU."""
    import jax

    chip = hardware.get("chip")
    if hardware.get("platform") != "tpu" or chip is None:
        raise ValueError(
            f"{HBM_UTILIZATION} sizes the KV pool from a TPU chip's HBM; this run is on "
            f"{hardware.get('device_kind') or hardware.get('platform')}: give kv_pool_bytes"
        )
    device = jax.devices()[0]
    stats = device.memory_stats() or {}
    return size_pool(
        chip,
        model_cfg,
        engine_cfg,
        utilization,
        devices=[device],
        hbm_bytes=stats.get("bytes_limit"),
        in_use_bytes=int(stats.get("bytes_in_use", 0)),
    )
