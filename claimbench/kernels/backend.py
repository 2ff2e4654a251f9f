"""Attention backend selection: Pallas on TPU, native kernels on CPU, XLA elsewhere.

- "xla": kernels/xla_rpa.py, blocked attention in XLA, runs on any XLA backend.
- "cpu": the same, with the decode and prefill parts by the native CPU kernels
  (kernels/native_attention.py), compiled on first use.
- "pallas": the Pallas ragged paged attention kernel, kernels/pallas_rpa.py (TPU;
  interpret mode elsewhere).

All share one contract (``AttentionBackend``), check their inputs the same way
(metadata.check_inputs) and are tested against the naive kernels/reference.py.
- "auto": "pallas" on TPU; "cpu" on CPU when the native kernels build, else "xla".

The target platform defaults to the running one. Naming it ("tpu") chooses for a chip that
is not here: `tpu-check` lowers the step for a TPU on a CPU host, where the Pallas kernel
must be compiled rather than interpreted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import jax

from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import AttentionMetadata

BACKENDS = ("auto", "xla", "cpu", "pallas")


class AttentionBackend(Protocol):
    """q f[T, Hq, D], k and v f[T, Hkv, D], the layer's cache and the step's metadata ->
    (f[T, Hq, D], the cache with the step's K/V written); see reference.py."""

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


def resolve_backend_name(name: str, target_platform: str | None = None) -> str:
    """ "auto" -> the best backend for ``target_platform`` (None: the running platform);
    unknown names raise ValueError. Asking for "cpu" where the native kernel cannot be used
    raises ValueError with the reason."""
    if name not in BACKENDS:
        raise ValueError(f"unknown attention_backend {name!r}; expected one of {BACKENDS}")
    platform = target_platform or jax.default_backend()
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


@dataclass(frozen=True)
class WithVerify:
    """The "xla" backend whose verify steps (every prefill or mixed chunk at most ``width``
    tokens) attend all their chunks at once (kernels/xla_verify.py). Frozen, so equal
    backends hash equal (the step's static argument)."""

    width: int  # 1 + k: a sequence's verify chunk

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
    ) -> tuple[jax.Array, LayerKV]:
        from claimbench.kernels.xla_rpa import ragged_paged_attention

        return ragged_paged_attention(
            q,
            k,
            v,
            cache,
            md,
            sm_scale=sm_scale,
            sliding_window=sliding_window,
            soft_cap=soft_cap,
            verify_width=self.width,
        )


@dataclass(frozen=True)
class CompiledPallas:
    """The Pallas kernel always compiled (never interpreted), with ``generation``'s block
    sizes: the backend for lowering on a host whose running platform is not the target.
    A frozen dataclass, so equal targets hash equal (the step's static argument)."""

    generation: str  # TPU generation, a key of rpa_blocks.BLOCK_SIZES: "v5e", "v6e", ...

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
    ) -> tuple[jax.Array, LayerKV]:
        from claimbench.kernels.pallas_rpa import ragged_paged_attention

        return ragged_paged_attention(
            q,
            k,
            v,
            cache,
            md,
            sm_scale=sm_scale,
            sliding_window=sliding_window,
            soft_cap=soft_cap,
            interpret=False,
            generation=self.generation,
        )


def get_backend(
    name: str,
    target_platform: str | None = None,
    tpu_generation: str | None = None,
    *,
    verify_width: int | None = None,
) -> AttentionBackend:
    """The attention function for a backend name (after ``resolve_backend_name``), for
    ``target_platform`` (None: the running platform). Targeting "tpu" with a
    ``tpu_generation`` gives the Pallas kernel compiled for that chip wherever this runs.
    ``verify_width`` (1 + k under speculative decoding) gives "xla" the verify path for
    steps of short chunks (benchmarks/verify_step.py: a batch-32 verify step 7.1x a decode
    step through its prefill path, 1.7x through the verify path). "cpu" and "pallas" attend
    them as any step: the native prefill kernel already tiles by each chunk's real length
    (the verify path measured slower there), and the Pallas kernel blocks ragged queries."""
    if verify_width is not None and verify_width < 2:
        raise ValueError(f"verify_width must be >= 2, got {verify_width}")
    name = resolve_backend_name(name, target_platform)
    if verify_width is not None and name == "xla":
        return WithVerify(verify_width)
    if name == "pallas" and target_platform == "tpu" and tpu_generation is not None:
        return CompiledPallas(tpu_generation)
    if name == "pallas":
        from claimbench.kernels.pallas_rpa import ragged_paged_attention

        return ragged_paged_attention
    if name == "cpu":
        from claimbench.kernels.native_attention import ragged_paged_attention

        return ragged_paged_attention
    from claimbench.kernels.xla_rpa import ragged_paged_attention

    return ragged_paged_attention
