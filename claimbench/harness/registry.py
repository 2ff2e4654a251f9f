"""Experiment discovery: a claim's module in ``<root>/experiments``, imported by file path."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from claimbench.harness.claims import EXPERIMENTS_DIR, Claim

NO_EXPERIMENT = "no experiment yet"

FiguresHook = Callable[[list[Path]], list[tuple[str, str]]]


class ExperimentError(RuntimeError):
    """An experiment module that cannot be used (it has no ``run(ctx)``)."""


def experiment_path(root: Path, claim: Claim) -> Path:
    """Where the claim's experiment lives: ``<root>/experiments/<module_name>.py``."""
    return root / EXPERIMENTS_DIR / f"{claim.module_name}.py"


def has_experiment(root: Path, claim: Claim) -> bool:
    """Whether the claim's experiment module exists."""
    return experiment_path(root, claim).is_file()


def claim_status(root: Path, claim: Claim, verdict: str) -> str:
    """What a listing shows: the verdict once run, else "not run" or "no experiment yet"."""
    if verdict != "not-run":
        return verdict
    return "not run" if has_experiment(root, claim) else NO_EXPERIMENT


def load_experiment(root: Path, claim: Claim) -> ModuleType:
    """Import the claim's experiment from its file.

    By file path rather than through ``sys.path``, so a user's claims project beside the built-in
    one never shadows (or is shadowed by) a module of the same name. Errors raised while the
    module executes propagate; a module without a callable ``run`` raises ExperimentError.
    """
    path = experiment_path(root, claim)
    if not path.is_file():
        raise ExperimentError(f"claim {claim.id!r}: {NO_EXPERIMENT} ({path} does not exist)")
    name = f"claimbench_experiment_{claim.module_name}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ExperimentError(f"claim {claim.id!r}: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    # Registered before executing: dataclasses and pickling look modules up in sys.modules.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    if not callable(getattr(module, "run", None)):
        raise ExperimentError(f"claim {claim.id!r}: {path} defines no run(ctx) function")
    return module


def figures_hook(module: ModuleType) -> FiguresHook | None:
    """The module's optional ``figures(run_dirs) -> [(title, inline svg)]``, or None."""
    hook = getattr(module, "figures", None)
    return hook if callable(hook) else None
