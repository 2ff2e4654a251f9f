"""A model directory's JSON files (config.json, generation_config.json, tokenizer_config.json,
the safetensors index, early_exit.json) read one way: a file that is not UTF-8, not JSON or
not a JSON object is one ModelLoadError naming it, never a traceback from whatever reads it
next."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class ModelLoadError(ValueError):
    """A checkpoint that cannot be loaded; the message is one line naming why."""


def read_json_object(file: Path) -> dict[str, Any]:
    """The JSON object in ``file``; ModelLoadError naming the file otherwise."""
    try:
        data = json.loads(Path(file).read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ModelLoadError(f"{file} is not UTF-8 text ({e.reason})") from e
    except json.JSONDecodeError as e:
        raise ModelLoadError(f"{file} is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise ModelLoadError(f"{file} must hold a JSON object, not {type(data).__name__}")
    return data
