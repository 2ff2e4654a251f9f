"""Exit heads on disk: a round trip, and each way the two files can be damaged is one
ModelLoadError naming the file, never a KeyError or a safetensors traceback."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from test_model import TINY, make_model

from claimbench.models.checkpoint import ModelLoadError
from claimbench.models.exit_heads import (
    CONFIG_FILE,
    HEADS_FILE,
    ExitHeads,
    load_exit_heads,
    save_exit_heads,
)


@pytest.fixture
def saved(tmp_path: Path):
    model = make_model(TINY)
    heads = ExitHeads(model, (1,))
    heads.heads[0].norm.weight[...] = heads.heads[0].norm.weight[...] * 2.0
    save_exit_heads(heads, tmp_path, threshold=0.9)
    return model, heads, tmp_path


def test_round_trip(saved) -> None:
    model, heads, path = saved
    loaded = load_exit_heads(path, model)
    assert loaded.layers == (1,)
    np.testing.assert_array_equal(loaded.heads[0].norm.weight[...], heads.heads[0].norm.weight[...])


@pytest.mark.parametrize(
    ("file", "text", "fragment"),
    [
        (CONFIG_FILE, "{not json", "early_exit.json is not valid JSON"),
        (CONFIG_FILE, "[1]", "early_exit.json must hold a JSON object"),
        (CONFIG_FILE, '{"threshold": 0.9}', "exit_layers must be a list of ints"),
        (CONFIG_FILE, '{"exit_layers": "1"}', "exit_layers must be a list of ints"),
        (HEADS_FILE, "truncated", "exit_heads.safetensors is not a readable safetensors file"),
    ],
)
def test_a_damaged_file_is_one_load_error(saved, file, text, fragment) -> None:
    model, _, path = saved
    (path / file).write_text(text)
    with pytest.raises(ModelLoadError, match=fragment) as info:
        load_exit_heads(path, model)
    assert "\n" not in str(info.value)


def test_heads_for_other_layers_than_the_file_holds(saved) -> None:
    model, _, path = saved
    config = json.loads((path / CONFIG_FILE).read_text())
    (path / CONFIG_FILE).write_text(json.dumps({**config, "exit_layers": [1, 2]}))
    with pytest.raises(ValueError, match=r"exit layers must lie in \[1, 1\]"):
        load_exit_heads(path, model)
    # A layer the model has, whose tensors the file lacks.
    model3 = make_model(dataclasses.replace(TINY, num_layers=3))
    with pytest.raises(ModelLoadError, match=r"lacks \['exit_heads.2.norm.weight'"):
        load_exit_heads(path, model3)
