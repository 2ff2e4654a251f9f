"""HF-format checkpoints: save/load round trip, sharded index, and one-line load errors."""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file
from test_model import QWEN_TINY, TINY, make_model
from typer.testing import CliRunner

from claimbench.cli.main import app
from claimbench.models.checkpoint import (
    INDEX_FILE,
    SINGLE_FILE,
    ModelLoadError,
    hf_state_dict,
    load_model,
    save_model,
)

IDS = jnp.asarray([[1, 5, 9, 33, 2, 7]])


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [TINY, QWEN_TINY], ids=["llama-untied", "qwen2-tied-bias"])
def test_round_trip_f32(tmp_path: Path, cfg) -> None:
    model = make_model(cfg)
    save_model(model, cfg, tmp_path)
    loaded, loaded_cfg = load_model(tmp_path, "float32")
    assert loaded_cfg == cfg
    np.testing.assert_array_equal(loaded.forward_dense(IDS), model.forward_dense(IDS))


def test_hf_tensor_names(tmp_path: Path) -> None:
    names = set(hf_state_dict(make_model(QWEN_TINY)))
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names
    assert "model.layers.1.self_attn.q_proj.bias" in names
    assert "model.layers.1.self_attn.o_proj.bias" not in names
    assert "model.layers.0.mlp.down_proj.weight" in names
    assert "model.layers.0.post_attention_layernorm.weight" in names
    assert "model.norm.weight" in names
    untied = hf_state_dict(make_model(TINY))
    # transformers' [out, in] layout
    assert untied["lm_head.weight"].shape == (TINY.vocab_size, TINY.hidden_size)
    assert untied["model.layers.0.self_attn.k_proj.weight"].shape == (16, 32)


def test_save_bf16_and_load_as_either_dtype(tmp_path: Path) -> None:
    model = make_model(TINY)
    save_model(model, TINY, tmp_path, dtype="bfloat16")
    assert json.loads((tmp_path / "config.json").read_text())["torch_dtype"] == "bfloat16"
    as_bf16, _ = load_model(tmp_path, jnp.bfloat16)
    as_f32, _ = load_model(tmp_path, "float32")
    assert as_bf16.embed_tokens.embedding.dtype == jnp.bfloat16
    assert as_f32.embed_tokens.embedding.dtype == jnp.float32
    np.testing.assert_allclose(as_f32.forward_dense(IDS), model.forward_dense(IDS), atol=0.02)


def test_sharded_index(tmp_path: Path) -> None:
    model = make_model(TINY)
    tensors = {k: np.asarray(v) for k, v in hf_state_dict(model).items()}
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2]}
    shards["model-00002-of-00002.safetensors"] = names[1::2]
    for file, shard_names in shards.items():
        save_file({n: tensors[n] for n in shard_names}, tmp_path / file)
    weight_map = {n: f for f, ns in shards.items() for n in ns}
    (tmp_path / INDEX_FILE).write_text(json.dumps({"weight_map": weight_map}))
    (tmp_path / "config.json").write_text(json.dumps(TINY.to_hf()))
    loaded, _ = load_model(tmp_path, "float32")
    np.testing.assert_array_equal(loaded.forward_dense(IDS), model.forward_dense(IDS))


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    save_model(make_model(TINY), TINY, tmp_path)
    return tmp_path


def _rewrite_tensor(path: Path, name: str, value: np.ndarray) -> None:
    from safetensors.numpy import load_file

    tensors = load_file(path / SINGLE_FILE)
    tensors[name] = value
    save_file(tensors, path / SINGLE_FILE)


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"model directory .*nope does not exist"):
        load_model(tmp_path / "nope")


def test_missing_config(saved: Path) -> None:
    (saved / "config.json").unlink()
    with pytest.raises(ModelLoadError, match=r"config.json is missing"):
        load_model(saved)


def test_missing_weights(saved: Path) -> None:
    (saved / SINGLE_FILE).unlink()
    with pytest.raises(ModelLoadError, match="has neither model.safetensors nor"):
        load_model(saved)


def test_missing_shard(saved: Path) -> None:
    (saved / INDEX_FILE).write_text(json.dumps({"weight_map": {"a": "gone.safetensors"}}))
    with pytest.raises(ModelLoadError, match=r"gone.safetensors \(listed in"):
        load_model(saved)


def test_missing_tensor(saved: Path) -> None:
    from safetensors.numpy import load_file

    tensors = load_file(saved / SINGLE_FILE)
    del tensors["model.norm.weight"]
    save_file(tensors, saved / SINGLE_FILE)
    with pytest.raises(ModelLoadError, match="tensor model.norm.weight is missing"):
        load_model(saved)


def test_unsupported_architecture(saved: Path) -> None:
    d = json.loads((saved / "config.json").read_text())
    (saved / "config.json").write_text(json.dumps({**d, "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ModelLoadError, match="unsupported architecture .*GPT2LMHeadModel"):
        load_model(saved)


def test_shape_mismatch_names_tensor(saved: Path) -> None:
    name = "model.layers.1.mlp.up_proj.weight"
    _rewrite_tensor(saved, name, np.zeros((47, 32), np.float32))
    with pytest.raises(ModelLoadError, match=rf"shape mismatch for tensor {name}: .*\(47, 32\)"):
        load_model(saved)


def test_unknown_stored_dtype(saved: Path) -> None:
    _rewrite_tensor(saved, "model.norm.weight", np.zeros(32, np.int8))
    with pytest.raises(ModelLoadError, match="tensor model.norm.weight has unknown dtype I8"):
        load_model(saved)


def test_unknown_requested_dtype(saved: Path) -> None:
    with pytest.raises(ModelLoadError, match="unknown dtype 'float13'"):
        load_model(saved, "float13")


def test_errors_are_one_line() -> None:
    with pytest.raises(ModelLoadError) as info:
        load_model("/definitely/not/here")
    assert "\n" not in str(info.value)


def test_cli_info_bad_model_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["--model", str(tmp_path / "nope"), "model", "info"])
    assert result.exit_code == 2
    assert "does not exist" in result.output
    assert "Traceback" not in result.output


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _header_only(data: bytes) -> bytes:
    return data[: 8 + int.from_bytes(data[:8], "little")]  # the data region cut off


@pytest.mark.parametrize(
    "damage",
    [
        _truncated,
        _header_only,
        lambda data: b"",
        lambda data: b"\0" * 64,
        lambda data: b"<!doctype html><title>Sign in</title>",  # a saved download page
        lambda data: (10**9).to_bytes(8, "little") + data[8:],  # a header length past the end
    ],
    ids=["half", "header-only", "empty", "zeros", "html", "huge-header"],
)
def test_a_damaged_weights_file_is_one_load_error(saved: Path, damage) -> None:
    file = saved / SINGLE_FILE
    file.write_bytes(damage(file.read_bytes()))
    with pytest.raises(ModelLoadError, match=r"model.safetensors is not a readable safetensors"):
        load_model(saved)


def test_a_damaged_shard_is_one_load_error(saved: Path) -> None:
    names = list(hf_state_dict(make_model(TINY)))
    (saved / INDEX_FILE).write_text(json.dumps({"weight_map": dict.fromkeys(names, SINGLE_FILE)}))
    file = saved / SINGLE_FILE
    file.write_bytes(_truncated(file.read_bytes()))
    with pytest.raises(ModelLoadError, match=r"model.safetensors is not a readable safetensors"):
        load_model(saved)


def test_cli_damaged_weights_exit_2_in_one_line(saved: Path) -> None:
    file = saved / SINGLE_FILE
    file.write_bytes(_truncated(file.read_bytes()))
    result = CliRunner().invoke(app, ["--model", str(saved), "model", "info"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "is not a readable safetensors file" in result.output
