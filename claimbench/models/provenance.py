"""Which model a run used: its directory, its architecture and the sha256 of its weight files.

Read without JAX from config.json and the safetensors headers, so ``run`` can check a --model
directory once, before any experiment starts, and every stored run can say which weights it
measured (the shipped model is retrained from time to time; only the hashes tell runs apart).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import struct
from pathlib import Path
from typing import Any

from claimbench.models.config import ModelConfig

CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
INDEX_FILE = "model.safetensors.index.json"
_HASH_CHUNK_BYTES = 8 * 2**20


class ModelDirError(ValueError):
    """A model directory an engine could not load; the message is one line naming why."""


def read_model_config(path: Path) -> ModelConfig:
    """``path/config.json`` as a ModelConfig (a decoder the engine supports); else ModelDirError."""
    config_file = path / CONFIG_FILE
    if not config_file.is_file():
        raise ModelDirError(f"{path} has no {CONFIG_FILE}")
    try:
        return ModelConfig.from_hf(json.loads(config_file.read_text()))
    except json.JSONDecodeError as err:
        raise ModelDirError(f"{config_file} is not valid JSON ({err})") from None
    except KeyError as err:
        raise ModelDirError(f"{config_file} lacks field {err}") from None
    except (TypeError, ValueError) as err:
        raise ModelDirError(f"{config_file}: {str(err).splitlines()[0]}") from None


def _num_elements(file: Path) -> int:
    """Elements stored in one safetensors file, from its header (8-byte length + JSON)."""
    try:
        with file.open("rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            if header_len > file.stat().st_size - 8:
                raise ValueError("header longer than the file")
            header = json.loads(f.read(header_len))
        return sum(
            math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__"
        )
    except (struct.error, ValueError, KeyError, TypeError, AttributeError):
        raise ModelDirError(f"{file} is not a readable safetensors file") from None


def _weight_files(path: Path) -> list[Path]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelDirError(f"{path} has no *.safetensors weight files")
    index = path / INDEX_FILE
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (json.JSONDecodeError, KeyError, AttributeError, TypeError):
            raise ModelDirError(f"{index} has no valid weight_map") from None
        missing = sorted(shards - {f.name for f in files})
        if missing:
            raise ModelDirError(f"{index} lists missing shard(s) {missing}")
    return files


def check_model_dir(path: Path) -> ModelConfig:
    """The model's config if ``path`` holds what an engine loads (config.json the engine
    supports, safetensors weights with readable headers, tokenizer.json); else ModelDirError."""
    if not path.is_dir():
        raise ModelDirError(f"{path} is not a directory")
    config = read_model_config(path)
    for file in _weight_files(path):
        _num_elements(file)
    if not (path / TOKENIZER_FILE).is_file():
        raise ModelDirError(f"{path} has no {TOKENIZER_FILE}")
    return config


@functools.lru_cache(maxsize=64)
def _sha256(file: str, size: int, mtime_ns: int) -> str:
    # Keyed on size and mtime as well as the name: a run --all hashes each weight file once,
    # and a file rewritten in between (a retrain) is hashed again.
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        while chunk := f.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def file_sha256(file: Path) -> str:
    """sha256 (hex) of a file's bytes; unchanged files are hashed once per process."""
    stat = file.stat()
    return _sha256(str(file.resolve()), stat.st_size, stat.st_mtime_ns)


def describe_model(path: Path) -> dict[str, Any]:
    """What meta.json records of a model: name (the directory's), path, architecture summary
    and ``weights_sha256`` (file name -> sha256 of every *.safetensors file).

    ``num_params`` counts the elements actually stored in the weight files. ModelDirError when
    ``path`` lacks a readable config.json or weights (a tokenizer is not required: an experiment
    may load the weights alone).
    """
    config = read_model_config(path)
    files = _weight_files(path)
    return {
        "name": path.resolve().name,
        "path": str(path.resolve()),
        "architecture": {
            "model_type": config.model_type,
            "num_layers": config.num_layers,
            "hidden_size": config.hidden_size,
            "num_q_heads": config.num_heads,
            "num_kv_heads": config.num_kv_heads,
            "head_dim": config.head_dim,
            "vocab_size": config.vocab_size,
            "num_params": sum(_num_elements(f) for f in files),
        },
        "weights_sha256": {f.name: file_sha256(f) for f in files},
        "hub": _hub_origin(path),
    }


def _hub_origin(path: Path) -> dict[str, str] | None:
    """Repo and commit of a checkpoint `model fetch` wrote (its fetch.json), else None."""
    try:
        record = json.loads((path / "fetch.json").read_text())
        return {key: str(record[key]) for key in ("repo", "revision", "source")}
    except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError):
        return None
