"""A checkpoint's generation_config.json: the stop ids generation defaults to.

transformers' ``generate`` and vLLM both take the default stop ids from
generation_config.json when the checkpoint has one (Qwen2.5-Instruct's lists
``[151645, 151643]``: end of turn and end of text, where config.json names only the
first), and from config.json's ``eos_token_id`` otherwise. Sampling defaults in the file
(temperature, top_p) are not applied: a request states its own.
"""

from __future__ import annotations

from pathlib import Path

from claimbench.models.config import stop_token_ids
from claimbench.models.json_files import read_json_object

GENERATION_CONFIG_FILE = "generation_config.json"


def read_stop_token_ids(path: Path, vocab_size: int) -> tuple[int, ...] | None:
    """The ``eos_token_id`` ids of ``path/generation_config.json``, or None when the file or
    the field is absent. ValueError (one line naming the file and the value) for a file that
    is not JSON or an id outside ``[0, vocab_size)``."""
    file = Path(path) / GENERATION_CONFIG_FILE
    if not file.is_file():
        return None
    config = read_json_object(file)
    if config.get("eos_token_id") is None:
        return None
    value = config["eos_token_id"]
    try:
        ids = stop_token_ids(value, "eos_token_id")
    except ValueError as e:
        raise ValueError(f"{file}: {e}") from e
    for tok in ids:
        if not 0 <= tok < vocab_size:
            raise ValueError(f"{file}: eos_token_id {tok} outside vocab of {vocab_size}")
    return ids or None


def stop_token_ids_source(path: Path) -> str:
    """Which file names the checkpoint's stop ids: generation_config.json or config.json."""
    has_own = read_stop_token_ids(path, vocab_size=2**63) is not None
    return GENERATION_CONFIG_FILE if has_own else "config.json"
