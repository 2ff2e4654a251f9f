"""Secrets the CLI takes (the /metrics key, bench's API keys): from a file or the environment,
never from argv, where every user of the machine sees them in `ps`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

METRICS_KEY_ENV_VAR = "CLAIMBENCH_METRICS_KEY"
API_KEY_ENV_VAR = "CLAIMBENCH_API_KEY"

MetricsKeyFileOption = Annotated[
    Path | None,
    typer.Option(
        "--metrics-key-file",
        help=f"A file holding the /metrics Bearer key (or set ${METRICS_KEY_ENV_VAR}).",
    ),
]


def read_secret(file: Path | None, env_var: str, flag: str) -> str | None:
    """The secret in ``file`` (its first line, stripped), else in ``env_var``, else None.
    ValueError naming ``flag`` when the file cannot be read or holds nothing."""
    if file is None:
        return os.environ.get(env_var) or None
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{flag} {file}: cannot read it ({e})") from None
    secret = text.splitlines()[0].strip() if text.strip() else ""
    if not secret:
        raise ValueError(f"{flag} {file} is empty")
    return secret


def read_secret_list(file: Path | None, env_var: str, flag: str) -> list[str]:
    """The secrets in ``file`` (one a line, blank lines skipped), else in ``env_var``
    (separated by whitespace or commas), else []. ValueError naming ``flag`` when the file
    cannot be read or holds none."""
    if file is None:
        return os.environ.get(env_var, "").replace(",", " ").split()
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{flag} {file}: cannot read it ({e})") from None
    secrets = [line.strip() for line in text.splitlines() if line.strip()]
    if not secrets:
        raise ValueError(f"{flag} {file} is empty")
    return secrets
