"""Attention backend selection: Pallas on TPU, native kernels on CPU, XLA elsewhere.

- "xla": kernels/reference.py, pure jnp, runs on any XLA backend.
- "cpu": the same, with attention by the native CPU kernels
  (kernels/native_attention.py), compiled on first use.
- "pallas": the Pallas ragged paged attention kernel (TPU; interpret mode elsewhere).
- "auto": "pallas" on TPU; "cpu" on CPU when the native kernels build, else "xla".
"""

from __future__ import annotations

from typing import Protocol

import jax

from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import AttentionMetadata

BACKENDS = ("auto", "xla", "cpu", "pallas")


class AttentionBackend(Protocol):
    def __call__(
        self,
        q: jax.Array,
        k: jax.Array,
        v: jax.Array,
        cache: LayerKV,
        md: AttentionMetadata,
        *,
        sm_scale: float,
        sliding_window: int | None = None,
        soft_cap: float | None = None,
    ) -> tuple[jax.Array, LayerKV]: ...


def resolve_backend_name(name: str) -> str:
    """ "auto" -> the best backend here; unknown names raise ValueError. Asking for "cpu"
    where the native kernel cannot be used raises ValueError with the reason."""
    if name not in BACKENDS:
        raise ValueError(f"unknown attention_backend {name!r}; expected one of {BACKENDS}")
    platform = jax.default_backend()
    if name == "auto":
        if platform == "tpu":
            return "pallas"
        return "cpu" if platform == "cpu" and _native_unavailable() is None else "xla"
    if name == "cpu" and (reason := _native_unavailable()) is not None:
        raise ValueError(f"attention_backend 'cpu' is unavailable: {reason}")
    return name


def _native_unavailable() -> str | None:
    from claimbench.kernels.native_attention import unavailable_reason

    return unavailable_reason()


def get_backend(name: str) -> AttentionBackend:
    """The attention function for a backend name (after ``resolve_backend_name``)."""
    name = resolve_backend_name(name)
    if name == "pallas":
        from claimbench.kernels.ragged_paged_attention import ragged_paged_attention

        return ragged_paged_attention
    if name == "cpu":
        from claimbench.kernels.native_attention import ragged_paged_attention

        return ragged_paged_attention
    from claimbench.kernels.reference import ragged_paged_attention

    return ragged_paged_attention
