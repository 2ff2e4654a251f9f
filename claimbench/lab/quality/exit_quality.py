"""Early-exit quality the way it is served: through the paged cache with propagated K/V.

exit_train.py measures the exit heads on the dense forward, where later tokens attend to
every layer's full K/V. Served, a token that exited writes its later layers' K/V from its
propagated hidden state (models/early_exit.py), and every later token attends to that. Two
measurements see the difference:

* ``teacher_forced``: held-out windows fed one token per decode-only step through
  ``early_exit_forward`` (every token eligible to exit, the cache holding propagated K/V of
  earlier exits), once at the threshold and once never exiting (threshold above 1, the same
  path and kernels): perplexity of the next held-out token under each, top-1 agreement of
  the two, and the share of layers skipped.
* ``greedy_agreement``: greedy outputs of an engine with early exit on against one with it
  off (served through the engine, prefill never exiting): the share of output positions
  that hold the same token, and the mean number of leading tokens that agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from claimbench.engine.config import DEFAULT_PAGE_SIZE
from claimbench.engine.kv.kv_cache import allocate_kv_cache, page_layout, resolve_kv_dtype
from claimbench.kernels.backend import AttentionBackend, get_backend, resolve_backend_name
from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import AttentionMetadata
from claimbench.models.early_exit import early_exit_forward
from claimbench.models.exit_heads import ExitHeads
from claimbench.models.llama import LlamaForCausalLM, Rope, rope_table

NEVER_EXIT = 2.0  # a threshold no max softmax probability reaches
PAGE_SIZE = DEFAULT_PAGE_SIZE  # its paged cache's pages, as the engine lays them out


@dataclass(frozen=True)
class ServedExitQuality:
    """Teacher-forced quality of early exit over propagated K/V, against never exiting."""

    threshold: float
    top1_agreement: float  # share of positions whose argmax equals the never-exit argmax
    ppl_exit: float  # perplexity of the next held-out token with early exit
    ppl_full: float  # the same path never exiting
    layers_skipped_pct: float  # 100 x mean(num_layers - layers run) / num_layers
    num_tokens: int  # predicted tokens


@partial(jax.jit, static_argnums=(0, 1, 2))
def _teacher_forced(
    attention: AttentionBackend,
    threshold: float,
    graphdef: nnx.GraphDef,
    state: nnx.State,
    rope: Rope,
    caches: list[LayerKV],
    windows: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """windows i32[B, S] -> (log-probs f32[B, S, V] after each token, layers run i32[B, S])."""
    model, heads = nnx.merge(graphdef, state)
    num_seqs, length = windows.shape
    pages_per_seq = -(-length // PAGE_SIZE)
    page_indices = 1 + jnp.arange(num_seqs * pages_per_seq, dtype=jnp.int32).reshape(
        num_seqs, pages_per_seq
    )

    def step(caches, position):
        slots = page_indices[:, position // PAGE_SIZE] * PAGE_SIZE + position % PAGE_SIZE
        md = AttentionMetadata(
            slot_mapping=slots,
            cu_q_lens=jnp.arange(num_seqs + 1, dtype=jnp.int32),
            kv_lens=jnp.full(num_seqs, position + 1, jnp.int32),
            page_indices=page_indices,
            num_seqs=jnp.asarray([num_seqs], jnp.int32),
            # One token per sequence: a decode-only step, every token eligible to exit.
            distribution=jnp.full(3, num_seqs, jnp.int32),
        )
        positions = jnp.full(num_seqs, position, jnp.int32)
        out = early_exit_forward(
            model,
            heads,
            threshold,
            windows[:, position],
            positions,
            caches,
            md,
            attention=attention,
            rope=rope,
        )
        logprobs = jax.nn.log_softmax(model.logits(out.hidden).astype(jnp.float32), axis=-1)
        return out.kv_caches, (logprobs, out.exit_layers)

    _, (logprobs, layers) = jax.lax.scan(step, caches, jnp.arange(length))
    return jnp.moveaxis(logprobs, 0, 1), jnp.moveaxis(layers, 0, 1)


def teacher_forced(
    model: LlamaForCausalLM,
    heads: ExitHeads,
    threshold: float,
    windows: np.ndarray,
    *,
    attention_backend: str = "auto",
) -> ServedExitQuality:
    """windows i32[B, S + 1] of held-out tokens -> the quality of predicting tokens 1..S from
    the tokens before them, one decode step per position, against never exiting."""
    if windows.ndim != 2 or windows.shape[1] < 2:
        raise ValueError(f"need windows of shape [B, S + 1] with S >= 1, got {windows.shape}")
    num_seqs, length = windows.shape[0], windows.shape[1] - 1
    backend = resolve_backend_name(attention_backend)
    num_pages = 1 + num_seqs * -(-length // PAGE_SIZE)
    inputs = jnp.asarray(windows[:, :-1], jnp.int32)
    targets = jnp.asarray(windows[:, 1:], jnp.int32)[..., None]
    graphdef, state = nnx.split((model, heads))
    rope = rope_table(model.cfg, length)
    results = {}
    for name, cut in (("exit", threshold), ("full", NEVER_EXIT)):
        caches = allocate_kv_cache(
            page_layout(model.cfg, backend),
            num_pages,
            PAGE_SIZE,
            resolve_kv_dtype("auto", model.dtype),
            attention_backend=backend,
        )
        results[name] = _teacher_forced(
            get_backend(attention_backend), float(cut), graphdef, state, rope, caches, inputs
        )
    (exit_lp, exit_layers), (full_lp, _) = results["exit"], results["full"]
    num_layers = model.cfg.num_layers
    nll_exit = -jnp.take_along_axis(exit_lp, targets, -1)
    nll_full = -jnp.take_along_axis(full_lp, targets, -1)
    return ServedExitQuality(
        threshold=float(threshold),
        top1_agreement=float((exit_lp.argmax(-1) == full_lp.argmax(-1)).mean()),
        ppl_exit=float(jnp.exp(nll_exit.mean())),
        ppl_full=float(jnp.exp(nll_full.mean())),
        layers_skipped_pct=float(
            100.0 * (num_layers - np.asarray(exit_layers)).mean() / num_layers
        ),
        num_tokens=num_seqs * length,
    )


def greedy_agreement(on: list[list[int]], off: list[list[int]]) -> tuple[float, float]:
    """Greedy outputs with early exit on and off, per request in the same order ->
    (share of output positions holding the same token, mean leading tokens that agree)."""
    if len(on) != len(off) or any(len(a) != len(b) for a, b in zip(on, off, strict=False)):
        raise ValueError("early exit on and off must give outputs of the same lengths")
    same = [np.asarray(a) == np.asarray(b) for a, b in zip(on, off, strict=True)]
    share = float(np.concatenate(same).mean()) if same else float("nan")
    leading = [int(np.argmin(s)) if not s.all() else len(s) for s in same]
    return share, float(np.mean(leading)) if leading else float("nan")
