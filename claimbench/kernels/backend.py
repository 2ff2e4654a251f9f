"""Attention backend selection: the XLA path everywhere, the Pallas kernel on TPU."""

from __future__ import annotations

from typing import Protocol

import jax

from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import AttentionMetadata

BACKENDS = ("auto", "xla", "pallas")


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
    """ "auto" -> "pallas" on TPU, "xla" elsewhere; unknown names raise ValueError."""
    if name not in BACKENDS:
        raise ValueError(f"unknown attention_backend {name!r}; expected one of {BACKENDS}")
    if name == "auto":
        return "pallas" if jax.default_backend() == "tpu" else "xla"
    return name


def get_backend(name: str) -> AttentionBackend:
    """The attention function for a backend name (after ``resolve_backend_name``)."""
    name = resolve_backend_name(name)
    if name == "pallas":
        from claimbench.kernels.ragged_paged_attention import ragged_paged_attention

        return ragged_paged_attention
    from claimbench.kernels.reference import ragged_paged_attention

    return ragged_paged_attention
