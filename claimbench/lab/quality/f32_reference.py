"""A float32 prompt pass computed one decoder layer at a time, for models too large to serve
in float32 on one chip (a 7B model's f32 weights are 30.5 GB).

The result is what a float32 engine's prompt pass gives (lab/quality/quality.py: per window,
each position's log-probability of the next token and the most likely next token), from
the same checkpoint upcast to float32 and every matmul at full f32 precision: the windows
go through the embedding, then each layer in turn (its weights read from the checkpoint,
placed on the device, applied to every window with dense causal attention, and dropped),
then the final norm and head. The device holds one layer's f32 weights, the windows' f32
hidden states and one chunk's temporaries, never the whole model.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from claimbench.lab.quality.quality import PromptPass
from claimbench.models.checkpoint import load_module_state, read_config
from claimbench.models.moe import build_model

F32 = jnp.float32
WINDOWS_PER_CHUNK = 4  # windows per layer call: bounds attention scores and MLP temporaries
WINDOWS_PER_HEAD = 1  # windows per head call: bounds the f32[length, vocab] logits


@partial(jax.jit, static_argnums=0)
def embed_step(graphdef: nnx.GraphDef, state: nnx.State, tokens: jax.Array) -> jax.Array:
    return nnx.merge(graphdef, state)(tokens)


@partial(jax.jit, static_argnums=0)
def layer_step(graphdef: nnx.GraphDef, state: nnx.State, x: jax.Array) -> jax.Array:
    positions = jnp.broadcast_to(jnp.arange(x.shape[1]), x.shape[:2])
    return nnx.merge(graphdef, state).dense(x, positions, None)


@partial(jax.jit, static_argnums=(0, 1, 2))
def head_step(
    norm_def: nnx.GraphDef,
    head_def: nnx.GraphDef,
    tied: bool,
    norm_state: nnx.State,
    head_state: nnx.State,
    x: jax.Array,
    tokens: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """hidden f32[c, L, H], tokens i32[c, L] -> (log p(next) f32[c, L-1], argmax i32[c, L-1])."""
    hidden = nnx.merge(norm_def, norm_state)(x[:, :-1])
    head = nnx.merge(head_def, head_state)
    logits = head.attend(hidden) if tied else head(hidden)
    logprobs = jax.nn.log_softmax(logits.astype(F32), axis=-1)
    chosen = jnp.take_along_axis(logprobs, tokens[:, 1:, None], axis=-1)[..., 0]
    return chosen, jnp.argmax(logits, axis=-1).astype(jnp.int32)


def reference_pass(model_path: Path, windows: np.ndarray) -> PromptPass:
    """The float32 prompt pass of the model at ``model_path`` over windows i32[n, length],
    one layer's weights on the device at a time."""
    if windows.ndim != 2 or windows.shape[1] < 2:
        raise ValueError(f"need windows i32[n, length >= 2], got shape {windows.shape}")
    cfg = read_config(model_path)
    if cfg.is_moe:
        raise ValueError("the layer-by-layer float32 reference serves dense models only")
    model = nnx.eval_shape(lambda: build_model(cfg, dtype=F32, rngs=nnx.Rngs(0)))

    def place(module: nnx.Module, prefix: tuple) -> tuple[nnx.GraphDef, nnx.State]:
        graphdef = nnx.graphdef(module)
        return graphdef, load_module_state(model_path, cfg, module, prefix, F32)

    start = time.perf_counter()
    chunks = [
        jnp.asarray(windows[i : i + WINDOWS_PER_CHUNK], jnp.int32)
        for i in range(0, len(windows), WINDOWS_PER_CHUNK)
    ]
    with jax.default_matmul_precision("highest"):
        graphdef, state = place(model.embed_tokens, ("embed_tokens",))
        hidden = [embed_step(graphdef, state, c) for c in chunks]
        for i in range(cfg.num_layers):
            graphdef, state = place(model.layers[i], ("layers", i))
            hidden = [layer_step(graphdef, state, x) for x in hidden]
        del state
        norm_def, norm_state = place(model.norm, ("norm",))
        tied = model.lm_head is None
        head = model.embed_tokens if tied else model.lm_head
        head_def, head_state = place(head, ("embed_tokens",) if tied else ("lm_head",))
        logprobs, top1 = [], []
        for x, tokens in zip(hidden, chunks, strict=True):
            for j in range(0, x.shape[0], WINDOWS_PER_HEAD):
                lp, t1 = head_step(
                    norm_def,
                    head_def,
                    tied,
                    norm_state,
                    head_state,
                    x[j : j + WINDOWS_PER_HEAD],
                    tokens[j : j + WINDOWS_PER_HEAD],
                )
                logprobs.append(np.asarray(lp))
                top1.append(np.asarray(t1))
    return PromptPass(
        logprobs=np.concatenate(logprobs).astype(np.float32),
        top1=np.concatenate(top1).astype(np.int32),
        serve_s=time.perf_counter() - start,
    )
