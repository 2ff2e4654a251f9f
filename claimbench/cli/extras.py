"""The optional extras a command needs (pyproject.toml), checked before it starts.

`bash scripts/setup.sh` installs claimbench alone, which is what running claims needs; serving,
agent ops and fetching from the Hub come with extras. Without them every command still loads
(the CLI imports those packages only inside the commands that use them), and a command that
needs one says which, in one line, instead of failing on an import.
"""

from __future__ import annotations

import importlib

from claimbench.cli.common import fail

# Per extra, the modules its commands import (not every package it installs: httptools and
# uvloop only make uvicorn faster).
EXTRA_MODULES = {
    "serve": ("fastapi", "uvicorn", "prometheus_client", "httpx"),
    "ops": ("mcp", "jsonschema", "httpx", "prometheus_client"),
    "fetch": ("huggingface_hub",),
}


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    """The ones of ``modules`` that cannot be imported here."""
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def require_extra(command: str, extra: str, modules: tuple[str, ...] | None = None) -> None:
    """Exit 2 with one line when ``extra``'s modules (or ``modules`` of it) are missing."""
    missing = missing_modules(modules if modules is not None else EXTRA_MODULES[extra])
    if missing:
        fail(
            f"{command} needs {', '.join(missing)} (the {extra} extra): "
            f"pip install 'claimbench[{extra}]'"
        )
