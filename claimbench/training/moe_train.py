"""Train the shipped claimbench-tiny-moe: 8 experts, top-2, the same active parameters per token
as claimbench-tiny (each expert's intermediate size is half the dense MLP's, so the two
chosen experts hold the dense model's 768 units), on the same corpus with the same tokenizer.

It starts from claimbench-tiny by sparse upcycling (Komatsuzaki et al. 2023): embeddings,
attention and norms are copied; expert e is half (e mod 2) of the dense MLP's 768 units, its
down projection doubled, so a token routed to one expert of each half with weights 1/2 each
computes exactly the dense MLP; a little noise makes the copies of a half differ and the router
starts random. Training from scratch to comparable quality takes hours on two CPU cores; from
the dense model, minutes. Then all weights train on the corpus with next-token cross-entropy
plus Mixtral's load-balancing loss (mean over layers, weighted by ``router_aux_loss_coef``):
without it a router tends to collapse onto a few experts; with it routing is learned, spread
and input-dependent. Training runs the dense dispatch (every expert on every token, weighted by
the sparse routing matrix), the same function as the served ragged dispatch, cheaper on a CPU.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from rich.console import Console

from claimbench.models.checkpoint import ASSETS_DIR, load_model, save_model
from claimbench.models.config import ModelConfig
from claimbench.models.llama import LlamaForCausalLM, param_count
from claimbench.models.moe import MixtralForCausalLM, with_router_stats
from claimbench.models.tokenizer import Tokenizer
from claimbench.training.train import (
    SAVE_DTYPE,
    TARGET_CONFIG,
    TARGET_NAME,
    TrainConfig,
    _optimizer,
    load_sources,
    sample_batch,
    save_tokenizer,
)
from claimbench.workload.corpus import token_stream, training_files

MOE_NAME = "claimbench-tiny-moe"
NUM_EXPERTS, TOP_K = 8, 2
MOE_CONFIG = replace(
    TARGET_CONFIG,
    architecture="MixtralForCausalLM",
    intermediate_size=TARGET_CONFIG.intermediate_size // TOP_K,
    num_experts=NUM_EXPERTS,
    num_experts_per_tok=TOP_K,
    router_aux_loss_coef=0.01,
)


UPCYCLE_NOISE = 0.01  # relative std of the noise that makes copies of a dense half differ


def upcycle(dense: LlamaForCausalLM, cfg: ModelConfig, seed: int) -> MixtralForCausalLM:
    """An f32 MoE whose shared weights are ``dense``'s and whose experts are halves of its MLP."""
    if cfg.intermediate_size * 2 != dense.cfg.intermediate_size or cfg.num_experts % 2:
        raise ValueError(
            f"upcycling needs experts of half the dense MLP ({dense.cfg.intermediate_size}) and an "
            f"even expert count, got {cfg.intermediate_size} x {cfg.num_experts}"
        )
    moe = MixtralForCausalLM(cfg, dtype=jnp.float32, rngs=nnx.Rngs(seed), dispatch="dense")
    f = cfg.intermediate_size
    key = jax.random.PRNGKey(seed)
    copied = dict(nnx.to_flat_state(nnx.state(dense, nnx.Param)))
    values = []
    for path, variable in nnx.to_flat_state(nnx.state(moe, nnx.Param)):
        if path in copied:
            values.append((path, variable.replace(copied[path][...].astype(jnp.float32))))
            continue
        if "experts" not in path:  # the router keeps its random init
            values.append((path, variable))
            continue
        layer, weight = path[1], path[-1]
        mlp = dense.layers[layer].mlp
        if weight == "w2":  # down [f, d]: half h's rows, doubled
            full = mlp.down_proj.kernel[...].astype(jnp.float32)
            halves = [2 * full[h * f : (h + 1) * f] for h in range(2)]
        else:  # gate / up [d, f]: half h's columns
            proj = mlp.gate_proj if weight == "w1" else mlp.up_proj
            full = proj.kernel[...].astype(jnp.float32)
            halves = [full[:, h * f : (h + 1) * f] for h in range(2)]
        stacked = jnp.stack([halves[e % 2] for e in range(cfg.num_experts)])
        key, sub = jax.random.split(key)
        noise = jax.random.normal(sub, stacked.shape) * UPCYCLE_NOISE * jnp.std(stacked)
        values.append((path, variable.replace(stacked + noise)))
    nnx.update(moe, nnx.from_flat_state(values))
    return moe


def make_moe_train_step(graphdef: nnx.GraphDef, tx: optax.GradientTransformation, coef: float):
    """A jitted (params, opt_state, batch i32[B, S+1]) -> (params, opt_state, ce, balance,
    touched i32[layers]) step minimising cross-entropy + coef * mean balance loss."""

    def loss_fn(params, batch):
        model = nnx.merge(graphdef, params)
        logits, stats = with_router_stats(model.forward_dense, batch[:, :-1])
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()
        balance = stats.balance_loss.mean()
        return ce + coef * balance, (ce, balance)

    @jax.jit
    def step(params, opt_state, batch):
        (_, (ce, balance)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, ce, balance

    return step


def train_moe_model(
    model: MixtralForCausalLM, tc: TrainConfig, stream: np.ndarray, *, console: Console
) -> tuple[MixtralForCausalLM, list[tuple[float, float]]]:
    """Train an f32 MoE (dense dispatch) on random windows of ``stream``; returns it and the
    logged (cross-entropy, balance loss) pairs."""
    if len(stream) <= tc.seq_len + 1:
        raise ValueError(f"token stream of {len(stream)} is shorter than seq_len={tc.seq_len}")
    cfg = model.cfg
    graphdef, params = nnx.split(model)
    tx = _optimizer(tc)
    opt_state = tx.init(params)
    step_fn = make_moe_train_step(graphdef, tx, cfg.router_aux_loss_coef)
    rng = np.random.default_rng(tc.seed)
    logged: list[tuple[float, float]] = []
    start = time.perf_counter()
    for step in range(tc.steps):
        batch = jnp.asarray(sample_batch(stream, rng, tc))
        params, opt_state, ce, balance = step_fn(params, opt_state, batch)
        if (step + 1) % tc.log_every == 0 or step + 1 == tc.steps:
            logged.append((float(ce), float(balance)))
            elapsed = time.perf_counter() - start
            console.log(
                f"{MOE_NAME} step {step + 1}/{tc.steps} loss {logged[-1][0]:.4f} "
                f"balance {logged[-1][1]:.3f} ({(step + 1) / elapsed:.2f} steps/s)"
            )
    return nnx.merge(graphdef, params), logged


def train_shipped_moe(
    out_dir: Path = ASSETS_DIR,
    *,
    steps: int = 200,
    seed: int = 0,
    batch_size: int = 4,
    seq_len: int = 256,
    peak_lr: float = 1e-3,
    stdlib_root: Path | None = None,
    console: Console | None = None,
) -> Path:
    """Upcycle claimbench-tiny (read from ``out_dir``, with its tokenizer), train it as an MoE
    and write it, in the same HF format, to ``out_dir``/claimbench-tiny-moe."""
    console = console or Console()
    tokenizer = Tokenizer.from_dir(out_dir / TARGET_NAME)
    dense, _ = load_model(out_dir / TARGET_NAME, "float32")
    train_texts = load_sources(training_files(stdlib_root))
    stream = token_stream(tokenizer, train_texts)
    console.log(f"corpus: {len(train_texts)} files, training stream {len(stream)} tokens")
    cfg = replace(MOE_CONFIG, vocab_size=tokenizer.vocab_size)
    tc = TrainConfig(
        steps=steps,
        batch_size=batch_size,
        seq_len=seq_len,
        peak_lr=peak_lr,
        seed=seed,
        warmup_steps=min(TrainConfig.warmup_steps, max(1, steps // 8)),
        log_every=min(10, steps),
    )
    start = time.perf_counter()
    model, logged = train_moe_model(upcycle(dense, cfg, seed), tc, stream, console=console)
    path = out_dir / MOE_NAME
    save_model(model, cfg, path, dtype=SAVE_DTYPE)
    save_tokenizer(tokenizer, path)
    console.log(
        f"{MOE_NAME}: {param_count(model)} params, final loss {logged[-1][0]:.4f}, balance "
        f"{logged[-1][1]:.3f}, {time.perf_counter() - start:.0f} s -> {path}"
    )
    return path
