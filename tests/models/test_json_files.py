"""Every JSON file of a model directory, damaged every way, is one ModelLoadError naming it:
config.json, generation_config.json, the safetensors index (load_model), tokenizer_config.json
(the chat template, the tokenizer's BOS) and early_exit.json."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from claimbench.models.checkpoint import default_model_path, read_config
from claimbench.models.json_files import ModelLoadError, read_json_object
from claimbench.serving.api.chat import ChatTemplate

DAMAGE = {
    "not-json": (b"{bad", "is not valid JSON"),
    "a-list": (b"[]", "must hold a JSON object, not list"),
    "a-number": (b"3", "must hold a JSON object, not int"),
    "not-utf8": (b"\xff\xfe{}", "is not UTF-8 text"),
}


@pytest.mark.parametrize(("data", "fragment"), DAMAGE.values(), ids=list(DAMAGE))
def test_read_json_object_names_the_file(tmp_path: Path, data: bytes, fragment: str) -> None:
    file = tmp_path / "x.json"
    file.write_bytes(data)
    with pytest.raises(ModelLoadError, match=fragment) as info:
        read_json_object(file)
    assert str(file) in str(info.value) and "\n" not in str(info.value)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A copy of the shipped model's small files (the weights linked, not copied)."""
    out = tmp_path / "model"
    out.mkdir()
    for file in default_model_path().iterdir():
        if file.suffix == ".safetensors":
            (out / file.name).symlink_to(file)
        else:
            shutil.copy(file, out / file.name)
    return out


@pytest.mark.parametrize("name", ["config.json", "generation_config.json"])
@pytest.mark.parametrize(("data", "fragment"), DAMAGE.values(), ids=list(DAMAGE))
def test_a_damaged_config_file_is_one_load_error(model_dir, name, data, fragment) -> None:
    (model_dir / name).write_bytes(data)
    with pytest.raises(ModelLoadError, match=f"{name} .*{fragment}"):
        read_config(model_dir)


@pytest.mark.parametrize(("data", "fragment"), DAMAGE.values(), ids=list(DAMAGE))
def test_a_damaged_tokenizer_config_stops_the_chat_template(model_dir, data, fragment) -> None:
    (model_dir / "tokenizer_config.json").write_bytes(data)
    with pytest.raises(ModelLoadError, match=f"tokenizer_config.json .*{fragment}"):
        ChatTemplate.for_model(model_dir)
