"""Where a run came from: origin, code revision and library versions, for meta.json (the
hardware is hardware/detection.py's)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

EVIDENCE_CLASSES = ("cpu", "gpu", "tpu", "analytic")
# The paths whose content produces results: a change elsewhere (site/, results/ rewritten by the
# quick start, README) does not make a run irreproducible from its commit.
RESULT_SOURCES = ("claimbench", "experiments", "claims.yaml", "pyproject.toml")
ORIGIN_ENV = "CLAIMBENCH_ORIGIN"
SOURCE_COMMIT = "SOURCE_COMMIT"  # written by scripts/export_source.sh


def origin() -> str:
    """Where a run was made: $CLAIMBENCH_ORIGIN if set (e.g. "nightly-tpu"), else the host name."""
    return os.environ.get(ORIGIN_ENV) or socket.gethostname()


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state(root: Path) -> dict[str, Any]:
    """The claims project's commit, and whether the RESULT_SOURCES under ``root`` differ from it
    (modified, staged, or new and not git-ignored); both None outside git."""
    # An export carries its commit; it may sit inside another checkout whose HEAD is not its own.
    if (root / SOURCE_COMMIT).exists():
        return exported_state(root)
    sha = _git(root, "rev-parse", "HEAD")
    if sha is None:
        return {"sha": None, "dirty": None}
    status = _git(root, "status", "--porcelain", "--", *RESULT_SOURCES)
    return {"sha": sha, "dirty": bool(status) if status is not None else None}


def exported_state(root: Path) -> dict[str, Any]:
    """The commit of a source tree exported without .git (scripts/export_source.sh, for a machine
    the checkout is copied to), read from its SOURCE_COMMIT file. Whether the files were changed
    after the export cannot be known, so ``dirty`` is None. Both None without the file."""
    marker = root / SOURCE_COMMIT
    try:
        sha = marker.read_text().strip()
    except OSError:
        return {"sha": None, "dirty": None}
    if len(sha) != 40 or any(c not in "0123456789abcdef" for c in sha):
        return {"sha": None, "dirty": None}
    return {"sha": sha, "dirty": None, "exported": True}


def library_versions() -> dict[str, str | None]:
    """Versions of Python and of the libraries that shape a measurement."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("claimbench", "jax", "jaxlib", "flax", "numpy"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions
