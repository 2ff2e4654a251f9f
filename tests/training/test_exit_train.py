"""Exit heads: distillation lowers their KL to the final head; save and load round-trip."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from engine_helpers import tiny_model
from rich.console import Console
from typer.testing import CliRunner

from claimbench.cli.main import app
from claimbench.models.exit_heads import ExitHeads, load_exit_heads, save_exit_heads
from claimbench.training.exit_train import distill, layer_logits
from claimbench.training.train import TrainConfig


def _kl(model, heads, tokens) -> float:
    """Mean KL(final || exit head) over the tokens."""
    exits, final = layer_logits(model, heads, tokens)
    log_q, log_p = jax.nn.log_softmax(exits, -1), jax.nn.log_softmax(final, -1)[None]
    return float((jnp.exp(log_p) * (log_p - log_q)).sum(-1).mean())


@pytest.mark.slow
def test_distillation_lowers_the_exit_heads_kl() -> None:
    model = tiny_model()
    heads = ExitHeads(model, (1,))
    # A repetitive stream: the final head learns nothing new from it, the exit head must.
    stream = np.tile(np.arange(3, 40, dtype=np.int32), 60)
    tokens = jnp.asarray(stream[:64][None])
    before = _kl(model, heads, tokens)
    tc = TrainConfig(steps=30, batch_size=4, seq_len=32, peak_lr=1e-2, log_every=30)
    distill(model, heads, stream, tc, console=Console(quiet=True))
    assert _kl(model, heads, tokens) < 0.8 * before


def test_heads_round_trip(tmp_path) -> None:
    model = tiny_model()
    heads = ExitHeads(model, (1,))
    heads.heads[0].adapter.kernel[...] = jnp.arange(64 * 64, dtype=jnp.float32).reshape(64, 64)
    save_exit_heads(heads, tmp_path, threshold=0.4)
    loaded = load_exit_heads(tmp_path, model)
    assert loaded.layers == (1,)
    want = heads.heads[0].adapter.kernel[...]
    np.testing.assert_array_equal(loaded.heads[0].adapter.kernel[...], want)


@pytest.mark.slow
def test_train_exits_refuses_bad_input(tmp_path) -> None:
    result = CliRunner().invoke(app, ["model", "train-exits", "--model", str(tmp_path)])
    assert result.exit_code == 2 and "tokenizer" in result.output
    result = CliRunner().invoke(app, ["model", "train-exits", "--threshold", "1.5"])
    assert result.exit_code == 2 and "--threshold" in result.output
