"""Experiment discovery: a claim's module in ``<root>/experiments``, imported by file path and
checked against the experiment contract (harness/experiment.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from claimbench.harness.claims import EXPERIMENTS_DIR, Claim
from claimbench.harness.experiment import Experiment, contract_violation, fill_defaults

NO_EXPERIMENT = "no experiment yet"


class ExperimentError(RuntimeError):
    """An experiment module that cannot be used (missing, or breaking the experiment contract)."""


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


def load_experiment(root: Path, claim: Claim) -> Experiment:
    """Import the claim's experiment from its file, checked against the contract.

    By file path rather than through ``sys.path``, so a user's claims project beside the built-in
    one never shadows (or is shadowed by) a module of the same name. Errors raised while the
    module executes propagate; a module that breaks the contract (no callable ``run``, a
    DEFAULT_PARAMS that is not a dict, a hook that is not a function) raises ExperimentError
    naming the file and what is wrong. Optional members it leaves out get their defaults.
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
    if (violation := contract_violation(module)) is not None:
        raise ExperimentError(f"claim {claim.id!r}: {path} {violation}")
    return fill_defaults(module)
