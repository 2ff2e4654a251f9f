"""Train exit heads by distillation, and measure what early exit costs in quality.

Each head learns to match the model's own final distribution from an intermediate layer:
the loss is KL(final || head) per token, summed over heads, on random windows of the
training corpus (the model's tokenizer, train.py's corpus). The model stays frozen; only
the heads' norm gains and adapters train, so the model served without early exit is
unchanged.

Quality is measured on held-out windows in the dense forward: each token takes the
distribution of the first head whose confidence reaches the threshold (else the final
head's). The dense forward lets later tokens attend to every layer's full K/V, where the
served path attends to propagated K/V of exited tokens, so it measures the heads' own
error, not the propagation's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from rich.console import Console

from claimbench.models.checkpoint import load_model
from claimbench.models.exit_heads import DEFAULT_THRESHOLD, ExitHeads, save_exit_heads
from claimbench.models.llama import LlamaForCausalLM
from claimbench.models.tokenizer import Tokenizer
from claimbench.training.train import TrainConfig, load_sources, sample_batch
from claimbench.workload.corpus import (
    HELDOUT_FILE,
    heldout_token_windows,
    token_stream,
    training_files,
)

# The saved threshold's held-out top-1 agreement with the full model, at least.
MIN_TOP1_AGREEMENT = 0.99


@dataclass(frozen=True)
class ExitQuality:
    threshold: float
    top1_agreement: float  # share of held-out tokens whose argmax matches the full model's
    ppl_full: float  # held-out perplexity per token without exit
    ppl_exit: float  # with exit at this threshold
    layers_skipped_pct: float  # mean share of layers each held-out token skipped


def layer_logits(model: LlamaForCausalLM, heads: ExitHeads, tokens: jax.Array):
    """tokens i32[B, S] -> (f32[H, B, S, V] each exit head's logits, f32[B, S, V] final)."""
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    x = model.embed_tokens(tokens)
    exits = []
    for index, layer in enumerate(model.layers):
        x = layer.dense(x, positions, None)
        head = heads.head_after(index + 1)
        if head is not None:
            exits.append(model.logits(head(x)))
    return jnp.stack(exits), model.logits(model.norm(x))


def distill(
    model: LlamaForCausalLM,
    heads: ExitHeads,
    stream: np.ndarray,
    tc: TrainConfig,
    *,
    console: Console,
) -> list[float]:
    """Train ``heads`` in place on windows of ``stream``; returns the logged losses."""
    model_def, model_state = nnx.split(model)
    heads_def, heads_state = nnx.split(heads)
    tx = optax.chain(optax.clip_by_global_norm(tc.grad_clip), optax.adam(tc.peak_lr))
    opt_state = tx.init(heads_state)

    def loss_fn(heads_state, batch):
        m = nnx.merge(model_def, jax.lax.stop_gradient(model_state))
        exits, final = layer_logits(m, nnx.merge(heads_def, heads_state), batch)
        target = jax.nn.softmax(jax.lax.stop_gradient(final), axis=-1)
        kl = optax.kl_divergence(jax.nn.log_softmax(exits, axis=-1), target[None])
        return kl.mean(axis=(1, 2)).sum()

    @jax.jit
    def step(heads_state, opt_state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(heads_state, batch)
        updates, opt_state = tx.update(grads, opt_state, heads_state)
        return optax.apply_updates(heads_state, updates), opt_state, loss

    rng = np.random.default_rng(tc.seed)
    losses, start = [], time.perf_counter()
    for index in range(tc.steps):
        batch = jnp.asarray(sample_batch(stream, rng, tc)[:, :-1])
        heads_state, opt_state, loss = step(heads_state, opt_state, batch)
        if (index + 1) % tc.log_every == 0 or index + 1 == tc.steps:
            losses.append(float(loss))
            elapsed = time.perf_counter() - start
            console.log(
                f"exit heads step {index + 1}/{tc.steps} KL {losses[-1]:.4f} ({elapsed:.0f} s)"
            )
    nnx.update(heads, heads_state)
    return losses


def exit_quality(
    model: LlamaForCausalLM,
    heads: ExitHeads,
    tokenizer: Tokenizer,
    thresholds: tuple[float, ...],
    *,
    num_windows: int = 16,
    length: int = 256,
    heldout_path: Path = HELDOUT_FILE,
) -> list[ExitQuality]:
    """Held-out top-1 agreement, perplexity and layers skipped per threshold (dense forward)."""
    windows = heldout_token_windows(tokenizer, num_windows, length + 1, 0, heldout_path)
    exits, final = jax.jit(lambda w: layer_logits(model, heads, w))(jnp.asarray(windows[:, :-1]))
    targets = jnp.asarray(windows[:, 1:])
    exit_lp = jax.nn.log_softmax(exits, axis=-1)  # [H, B, S, V]
    final_lp = jax.nn.log_softmax(final, axis=-1)
    confident = jnp.exp(exit_lp.max(axis=-1))  # [H, B, S]
    num_layers = model.cfg.num_layers
    layers = jnp.asarray(heads.layers)
    nll_full = -jnp.take_along_axis(final_lp, targets[..., None], -1)[..., 0]
    top1_full = final_lp.argmax(-1)
    rows = []
    for threshold in thresholds:
        hit = confident >= threshold
        first = jnp.where(hit.any(0), hit.argmax(0), len(heads.layers))  # [B, S], H = no exit
        lp = jnp.concatenate([exit_lp, final_lp[None]])
        chosen = jnp.take_along_axis(lp, first[None, ..., None], 0)[0]
        nll = -jnp.take_along_axis(chosen, targets[..., None], -1)[..., 0]
        exit_layer = jnp.concatenate([layers, jnp.asarray([num_layers])])[first]
        rows.append(
            ExitQuality(
                threshold=threshold,
                top1_agreement=float((chosen.argmax(-1) == top1_full).mean()),
                ppl_full=float(jnp.exp(nll_full.mean())),
                ppl_exit=float(jnp.exp(nll.mean())),
                layers_skipped_pct=float(100 * (1 - exit_layer / num_layers).mean()),
            )
        )
    return rows


def train_exits(
    model_dir: Path,
    *,
    layers: tuple[int, ...] | None = None,
    steps: int = 150,
    threshold: float | None = None,
    seed: int = 0,
    console: Console | None = None,
) -> list[ExitQuality]:
    """Distill exit heads for the model in ``model_dir`` (f32, then saved in its dtype),
    write them beside it and return the held-out quality at a sweep of thresholds.

    ``threshold`` None saves the lowest threshold of the sweep whose held-out top-1
    agreement with the full model is at least MIN_TOP1_AGREEMENT (CALM calibrates its
    threshold against such a consistency tolerance), else DEFAULT_THRESHOLD."""
    console = console or Console()
    model, cfg = load_model(model_dir, jnp.float32)
    layers = tuple(range(1, cfg.num_layers)) if layers is None else layers
    heads = ExitHeads(model, layers)
    tokenizer = Tokenizer.from_dir(model_dir)
    stream = token_stream(tokenizer, load_sources(training_files()))
    tc = TrainConfig(steps=steps, batch_size=8, seq_len=256, peak_lr=3e-3, seed=seed, log_every=25)
    distill(model, heads, stream, tc, console=console)
    sweep = {0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95}
    thresholds = tuple(sorted(sweep if threshold is None else sweep | {threshold}))
    quality = exit_quality(model, heads, tokenizer, thresholds)
    if threshold is None:
        consistent = [q.threshold for q in quality if q.top1_agreement >= MIN_TOP1_AGREEMENT]
        threshold = min(consistent, default=DEFAULT_THRESHOLD)
    console.log(f"saved threshold {threshold}")
    for q in quality:
        console.log(
            f"threshold {q.threshold:.2f}: layers skipped {q.layers_skipped_pct:.1f}%, "
            f"top-1 agreement {q.top1_agreement:.3f}, "
            f"ppl {q.ppl_exit:.2f} (no exit {q.ppl_full:.2f})"
        )
    saved = ExitHeads(model, layers, dtype=jnp.bfloat16)
    nnx.update(saved, jax.tree.map(lambda a: a.astype(jnp.bfloat16), nnx.state(heads)))
    save_exit_heads(
        saved, model_dir, threshold=threshold, quality={str(q.threshold): vars(q) for q in quality}
    )
    return quality
