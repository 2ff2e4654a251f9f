"""Early-exit quality as served (lab/quality/exit_quality.py): teacher-forced decode steps over
propagated K/V, against the dense forward, and greedy agreement."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from claimbench.lab.quality.exit_quality import greedy_agreement, teacher_forced
from claimbench.models.config import ModelConfig
from claimbench.models.exit_heads import ExitHeads
from claimbench.models.llama import LlamaForCausalLM
from claimbench.training.exit_train import layer_logits

CFG = ModelConfig(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=48,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    rope_theta=500.0,
)
WINDOWS = np.random.default_rng(0).integers(2, CFG.vocab_size, size=(3, 21)).astype(np.int32)


@pytest.fixture(scope="module")
def model_and_heads() -> tuple[LlamaForCausalLM, ExitHeads]:
    model = LlamaForCausalLM(CFG, dtype=jnp.float32, rngs=nnx.Rngs(0))
    heads = ExitHeads(model, (1, 2, 3))
    heads.heads[0].adapter.kernel[...] = 20.0 * jnp.eye(CFG.hidden_size)
    return model, heads


def _dense_ppl(logits: jax.Array) -> float:
    lp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(lp, jnp.asarray(WINDOWS[:, 1:])[..., None], -1)
    return float(jnp.exp(nll.mean()))


@pytest.mark.slow
def test_never_exiting_is_the_dense_model(model_and_heads) -> None:
    model, heads = model_and_heads
    q = teacher_forced(model, heads, 1.5, WINDOWS, attention_backend="xla")
    _, final = layer_logits(model, heads, jnp.asarray(WINDOWS[:, :-1]))
    # One decode step per token over the paged cache computes what the dense forward does.
    assert q.ppl_full == pytest.approx(_dense_ppl(final), rel=1e-4)
    assert q.ppl_exit == q.ppl_full
    assert q.top1_agreement == 1.0
    assert q.layers_skipped_pct == 0.0
    assert q.num_tokens == 3 * 20


@pytest.mark.slow
def test_threshold_zero_predicts_with_the_first_head(model_and_heads) -> None:
    """Every token exits after layer 1: its prediction is head 1's on layer 1, which attends
    only to layer-1 K/V (never propagated), so it equals the dense forward's head 1."""
    model, heads = model_and_heads
    q = teacher_forced(model, heads, 0.0, WINDOWS, attention_backend="xla")
    exits, final = layer_logits(model, heads, jnp.asarray(WINDOWS[:, :-1]))
    assert q.layers_skipped_pct == 75.0
    assert q.ppl_exit == pytest.approx(_dense_ppl(exits[0]), rel=1e-4)
    assert q.ppl_full == pytest.approx(_dense_ppl(final), rel=1e-4)
    agree = float((exits[0].argmax(-1) == final.argmax(-1)).mean())
    assert q.top1_agreement == pytest.approx(agree)


@pytest.mark.slow
def test_propagated_kv_changes_later_predictions(model_and_heads) -> None:
    """At a threshold where some tokens exit, tokens that run every layer attend to the
    propagated K/V of earlier exits: their predictions differ from the dense forward's."""
    model, heads = model_and_heads
    exits, final = layer_logits(model, heads, jnp.asarray(WINDOWS[:, :-1]))
    conf = np.asarray(jax.nn.softmax(exits, axis=-1).max(-1))  # [H, B, S]
    threshold = float(np.median(conf[0]))
    q = teacher_forced(model, heads, threshold, WINDOWS, attention_backend="xla")
    assert 0.0 < q.layers_skipped_pct < 75.0
    # Dense, with no propagation: each token takes its first confident head, else the final.
    hit = conf >= threshold
    first = np.where(hit.any(0), hit.argmax(0), 3)
    logits = np.concatenate([np.asarray(exits), np.asarray(final)[None]])
    chosen = np.take_along_axis(logits, first[None, ..., None], 0)[0]
    assert q.ppl_exit != pytest.approx(_dense_ppl(jnp.asarray(chosen)), rel=1e-4)


def test_teacher_forced_refuses_short_windows(model_and_heads) -> None:
    model, heads = model_and_heads
    with pytest.raises(ValueError, match="shape"):
        teacher_forced(model, heads, 0.5, WINDOWS[:, :1])


@pytest.mark.slow
def test_greedy_agreement() -> None:
    on = [[1, 2, 3, 4], [5, 6, 7, 8]]
    off = [[1, 2, 9, 4], [5, 6, 7, 8]]
    # 7 of 8 positions agree; leading agreement 2 and 4 tokens.
    assert greedy_agreement(on, off) == (7 / 8, 3.0)
    with pytest.raises(ValueError, match="same lengths"):
        greedy_agreement(on, [[1, 2, 3]])
