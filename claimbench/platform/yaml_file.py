"""Reading a YAML file a user names (tenants, agents, a ladder): every way it can fail to read
is one ValueError naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def load_yaml(path: Path, what: str) -> Any:
    """The YAML document in ``path`` (``what`` names the file's role in the message); a file
    that cannot be read, is not UTF-8 or is not valid YAML is a ValueError naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"cannot read {what} {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e.reason})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ValueError(f"{path} is not valid YAML{where}: {problem}") from None
