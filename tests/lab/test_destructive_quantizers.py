"""The counterfactual quantizers: two values per output channel, and a checkpoint of them."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from precision_helpers import write_tiny_model

from claimbench.lab.quality.destructive_quantizers import two_level, two_level_checkpoint
from claimbench.models.checkpoint import load_model
from claimbench.models.llama import Embedding


def test_two_level_keeps_each_channels_sign_and_mean_magnitude():
    w = jnp.array([[1.0, -4.0], [-3.0, 0.0]])
    # Per output column: |1|, |-3| -> 2; |-4|, |0| -> 2 (and sign(0) = 0).
    np.testing.assert_allclose(two_level(w, channel_axis=1), [[2.0, -2.0], [-2.0, 0.0]])
    # Per row: |1|, |-4| -> 2.5; |-3|, |0| -> 1.5.
    np.testing.assert_allclose(two_level(w, channel_axis=0), [[2.5, -2.5], [-1.5, 0.0]])
    with pytest.raises(ValueError, match=r"\(2,\), 1"):
        two_level(jnp.ones(2), channel_axis=1)


def test_checkpoint_holds_two_values_per_channel_and_is_written_once(tmp_path):
    source = write_tiny_model(tmp_path / "src")
    out = two_level_checkpoint(source, tmp_path / "cache")
    assert out.parent == tmp_path / "cache" and (out / "tokenizer.json").is_file()
    model, _ = load_model(out, jnp.float32)
    original, _ = load_model(source, jnp.float32)
    matrices = 0
    for (_, module), (_, before) in zip(
        nnx.iter_modules(model), nnx.iter_modules(original), strict=True
    ):
        if isinstance(module, nnx.Linear):  # [in, out]: one channel per column
            w, w0 = np.asarray(module.kernel[...]), np.asarray(before.kernel[...])
        elif isinstance(module, Embedding):  # [vocab, dim]: one channel per row
            w, w0 = np.asarray(module.embedding[...]).T, np.asarray(before.embedding[...]).T
        else:
            continue
        matrices += 1
        # Every output channel holds +m and -m only, each weight keeping its sign.
        assert all(len(np.unique(np.abs(column))) == 1 for column in w.T)
        np.testing.assert_array_equal(np.sign(w), np.sign(w0))
    assert matrices >= 8  # 2 layers x (4 attention + 3 MLP) + the tied embedding
    # The same content again: the directory already written, not a new one.
    mtime = (out / "model.safetensors").stat().st_mtime_ns
    assert two_level_checkpoint(source, tmp_path / "cache") == out
    assert (out / "model.safetensors").stat().st_mtime_ns == mtime
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [out.name]
    with pytest.raises(ValueError, match="no config.json"):
        two_level_checkpoint(tmp_path, tmp_path / "cache")
