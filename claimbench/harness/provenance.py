"""Where a run came from: hardware, code revision and library versions, for meta.json."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

EVIDENCE_CLASSES = ("cpu", "gpu", "tpu", "analytic")
# JAX names GPUs by their runtime on some versions; all of them are evidence class "gpu".
_PLATFORM_CLASS = {"cpu": "cpu", "tpu": "tpu", "gpu": "gpu", "cuda": "gpu", "rocm": "gpu"}


def evidence_class(platform_name: str) -> str:
    """The hardware class (cpu | gpu | tpu) of a JAX platform name; ValueError if unknown."""
    try:
        return _PLATFORM_CLASS[platform_name.lower()]
    except KeyError:
        raise ValueError(f"unknown platform {platform_name!r}") from None


def detect_hardware() -> dict[str, Any]:
    """hardware.detect() with platform as an evidence class and price_per_hour a number,
    plus the attention backend an engine gets by default here.

    price_per_hour is USD per hour for the whole visible machine; 0 where unpriced (a CPU).
    """
    from claimbench.harness.hardware import detect  # imports JAX: only when a run starts
    from claimbench.kernels.backend import resolve_backend_name

    info = dict(detect())
    info["platform"] = evidence_class(str(info["platform"]))
    info["price_per_hour"] = float(info.get("price_per_hour") or 0.0)
    # What "auto" attends with here (pallas, cpu = native kernels, or xla).
    info["attention_backend"] = resolve_backend_name("auto")
    return info


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state(root: Path) -> dict[str, Any]:
    """The claims project's commit and whether tracked files differ from it (None outside git)."""
    sha = _git(root, "rev-parse", "HEAD")
    if sha is None:
        return {"sha": None, "dirty": None}
    # Untracked files are ignored: results/ fills with new runs and would mark every run dirty.
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {"sha": sha, "dirty": bool(status) if status is not None else None}


def library_versions() -> dict[str, str | None]:
    """Versions of Python and of the libraries that shape a measurement."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("claimbench", "jax", "jaxlib", "flax", "numpy"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions
