"""Which engines an experiment builds, and how many earlier ones are still alive at each."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import pytest
from precision_helpers import run_context

from claimbench.harness.context import RunContext


def track_builds(
    context: type[RunContext], monkeypatch: pytest.MonkeyPatch
) -> list[tuple[dict[str, Any], int]]:
    """From now on, per engine ``context.engine`` builds, in order: (the options it was built
    with, how many engines it built before were still alive then); the list fills as it runs."""
    alive: list[weakref.ref] = []
    built: list[tuple[dict[str, Any], int]] = []
    engine = context.engine

    def tracked(self, **options):
        gc.collect()
        built.append((options, sum(ref() is not None for ref in alive)))
        made = engine(self, **options)
        alive.append(weakref.ref(made))
        return made

    monkeypatch.setattr(context, "engine", tracked)
    return built


def builds_with_alive(
    claim_id: str, params: dict[str, Any], model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[dict[str, Any], int]]:
    """Run the claim's experiment; per engine it built, in order: (the options it was built
    with, how many engines it built before were still alive then)."""
    built = track_builds(RunContext, monkeypatch)
    run_context(claim_id, params, model_dir)
    return built
