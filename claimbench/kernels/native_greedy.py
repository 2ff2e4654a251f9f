"""Each row's greedy token and log-sum-exp by a native CPU kernel (native/greedy.cc).

The sampler needs both every step: the greedy token of each row (the token of a greedy
request, and of a temperature that rounds to greedy) and the log-sum-exp the sampled
token's log-prob is reported against. XLA:CPU runs them as separate one-thread
reductions; ``greedy_logsumexp`` does both in one call split over the kernels' threads.
``reference`` is the same in plain jnp (``greedy_tokens``, the sampler's XLA path, and
``jax.nn.logsumexp``), which the tests compare against (tests/kernels/test_native_greedy.py):
the tokens equal, the log-sum-exp to rounding (its sum runs in another order).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from claimbench.kernels.greedy import greedy_tokens
from claimbench.kernels.native.build import NativeUnavailable, load_library

TARGET = "claimbench_greedy"


@functools.cache
def _register() -> str | None:
    """Build, load and register the kernel once: None, or why it cannot be used here."""
    try:
        lib = load_library()
    except NativeUnavailable as e:
        return str(e)
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.ClaimbenchGreedy), "cpu")
    return None


def unavailable_reason() -> str | None:
    """None when the kernel can be used here, else a one-line reason."""
    return _register()


def greedy_logsumexp(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    """logits f32[N, V] -> (the first index of each row's max, i32[N]; each row's
    log-sum-exp, f32[N]). A row holding a NaN gives V - 1 and NaN."""
    if (reason := unavailable_reason()) is not None:
        raise NativeUnavailable(reason)
    if logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError(f"greedy_logsumexp needs logits [N, V >= 1], got {logits.shape}")
    n = logits.shape[0]
    call = jax.ffi.ffi_call(
        TARGET,
        (jax.ShapeDtypeStruct((n,), jnp.int32), jax.ShapeDtypeStruct((n,), jnp.float32)),
    )
    return call(logits.astype(jnp.float32))


def reference(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``greedy_logsumexp`` in plain jnp: greedy_tokens (the first index of the row's max; a
    row holding a NaN gives V - 1) and jax.nn.logsumexp."""
    logits = logits.astype(jnp.float32)
    return greedy_tokens(logits), jax.nn.logsumexp(logits, axis=-1)
