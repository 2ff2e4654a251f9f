"""Training: the loop learns, is seeded, and the shipped configs keep their size contract."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from claimbench.cli.main import app
from claimbench.models.checkpoint import load_model
from claimbench.models.config import ModelConfig
from claimbench.models.llama import LlamaForCausalLM, param_count
from claimbench.models.tokenizer import Tokenizer
from claimbench.training.train import (
    DRAFT_CONFIG,
    TARGET_CONFIG,
    TrainConfig,
    sample_batch,
    train_model,
    train_shipped,
)
from claimbench.workload.corpus import heldout_texts, is_heldout

TINY = ModelConfig(
    vocab_size=16,
    hidden_size=32,
    intermediate_size=64,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    head_dim=16,
)


def _stream() -> np.ndarray:
    # A periodic sequence: perfectly predictable after one period of context.
    return np.tile(np.asarray([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8], np.int32), 200)


@pytest.mark.slow
def test_loss_falls_on_a_learnable_stream() -> None:
    tc = TrainConfig(steps=60, batch_size=4, seq_len=24, peak_lr=1e-2, warmup_steps=5, log_every=1)
    _, losses = train_model(TINY, tc, _stream(), console=Console(quiet=True))
    assert len(losses) == 60
    # Starts at chance (small init -> near-uniform logits), ends near the stream's entropy of 0.
    assert losses[0] == pytest.approx(np.log(TINY.vocab_size), abs=0.2)
    assert max(losses[-5:]) < 0.3


@pytest.mark.slow
def test_training_is_seeded() -> None:
    tc = TrainConfig(steps=3, batch_size=2, seq_len=8, log_every=1)
    a, losses_a = train_model(TINY, tc, _stream(), console=Console(quiet=True))
    b, losses_b = train_model(TINY, tc, _stream(), console=Console(quiet=True))
    assert losses_a == losses_b
    ids = np.asarray([[3, 1, 4]])
    np.testing.assert_array_equal(a.forward_dense(ids), b.forward_dense(ids))


def test_batches_are_windows_of_the_stream() -> None:
    stream = np.arange(1000, dtype=np.int32)
    tc = TrainConfig(steps=1, batch_size=5, seq_len=16)
    batch = sample_batch(stream, np.random.default_rng(0), tc)
    assert batch.shape == (5, 17)
    np.testing.assert_array_equal(np.diff(batch, axis=1), 1)


def test_short_stream_rejected() -> None:
    tc = TrainConfig(steps=1, batch_size=1, seq_len=64)
    with pytest.raises(ValueError, match="token stream of 20 is shorter than seq_len=64"):
        train_model(TINY, tc, np.zeros(20, np.int32), console=Console(quiet=True))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("steps", 0, "steps must be > 0, got 0"), ("peak_lr", 2.0, "peak_lr must be in")],
)
def test_train_config_validation(field: str, value, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(TrainConfig(steps=1), **{field: value})


def test_draft_is_at_most_an_eighth_of_target() -> None:
    from flax import nnx

    def count(cfg: ModelConfig) -> int:
        abstract = nnx.eval_shape(lambda: LlamaForCausalLM(cfg, rngs=nnx.Rngs(0)))
        return param_count(abstract)

    assert count(DRAFT_CONFIG) * 8 <= count(TARGET_CONFIG)
    assert DRAFT_CONFIG.vocab_size == TARGET_CONFIG.vocab_size


@pytest.mark.slow
def test_cli_train_rejects_bad_options(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["model", "train", "--steps", "0"])
    assert result.exit_code == 2 and "--steps" in result.output
    result = runner.invoke(app, ["model", "train", "--which", "draft", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "needs the target's tokenizer" in result.output


@pytest.mark.slow
def test_train_shipped_end_to_end(tmp_path: Path) -> None:
    """A fake stdlib tree -> tokenizer, held-out file and a target model in HF format that
    loads back; then a draft trained against that target's tokenizer."""
    root = tmp_path / "stdlib"
    for i in range(60):
        module = root / f"pkg{i % 3}" / f"mod_{i}.py"
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(
            f"def f_{i}(x):\n    return x * {i} + {i % 7}\n\n\nclass K{i}:\n    pass\n"
        )
    held = [i for i in range(60) if is_heldout(f"pkg{i % 3}/mod_{i}.py")]
    assert held
    out = tmp_path / "assets"
    quiet = Console(quiet=True)
    small = dict(batch_size=1, seq_len=16, stdlib_root=root, console=quiet)
    written = train_shipped(out, which="target", target_steps=2, **small)
    target = written["claimbench-tiny"]
    assert heldout_texts(out / "heldout.txt.gz") == [
        (root / f"pkg{i % 3}" / f"mod_{i}.py").read_text()
        for i in sorted(held, key=lambda i: f"pkg{i % 3}/mod_{i}.py")
    ]
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= {
        f.name for f in target.iterdir()
    }
    _, cfg = load_model(target, "float32")
    assert cfg.vocab_size == Tokenizer.from_dir(target).vocab_size
    assert cfg.bos_token_id == 0 and cfg.eos_token_id == 1
    draft = train_shipped(out, which="draft", draft_steps=1, **small)["claimbench-tiny-draft"]
    assert (draft / "tokenizer.json").read_text() == (target / "tokenizer.json").read_text()
