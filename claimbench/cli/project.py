"""Opening a claims project from the CLI: claims, runs and scores, with bad input as one line."""

from __future__ import annotations

import os
from pathlib import Path

from rich.markup import escape

from claimbench.cli.common import err_console, fail
from claimbench.harness import registry, results, scoring
from claimbench.harness.claims import Claim, ClaimsError, load_claims

RESULTS_DIR = "results"
SITE_DIR = "site"


def open_claims(root: Path) -> list[Claim]:
    """The project's claims, or exit 2 with the loader's one-line reason."""
    try:
        return load_claims(root)
    except ClaimsError as err:
        fail(str(err))


def results_dir(root: Path, option: Path | None, *, must_exist: bool = True) -> Path:
    """``--results-dir`` if given, else ``<root>/results``. A ``--results-dir`` that is a file
    exits 2; so does one that does not exist where ``must_exist`` (a mistyped store would
    otherwise score and publish no runs). The default may be missing (no runs yet), and so may
    the option where a command starts a store or reads an empty one (run, budget)."""
    if option is not None and not option.is_dir() and (must_exist or option.exists()):
        fail(f"--results-dir {option} is not a directory")
    return (option if option is not None else root / RESULTS_DIR).resolve()


def writable_store(store: Path) -> Path:
    """``store``, created if missing; exit 2 with one line if it cannot be written, before
    anything runs (a run would otherwise be measured and then not stored)."""
    try:
        (store / results.RUNS_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        fail(f"cannot create the results store {store}: {err.strerror}")
    if not os.access(store / results.RUNS_DIR, os.W_OK | os.X_OK):
        fail(f"the results store {store} is not writable")
    return store


def read_results(path: Path) -> list[results.StoredRun]:
    """The stored runs; each skipped path is reported on stderr (and left untouched)."""
    runs, skipped = results.read_runs(path)
    for item in skipped:
        err_console.print(
            f"[yellow]skipped[/] {escape(str(item.path))}: {escape(item.reason)}",
            markup=True,
            highlight=False,
            soft_wrap=True,
        )
    return runs


def claim_status(root: Path, score: scoring.ClaimScore) -> str:
    """What ``list`` shows: the verdict once run, else "not run" or "no experiment yet"."""
    return registry.claim_status(root, score.claim, score.verdict)
