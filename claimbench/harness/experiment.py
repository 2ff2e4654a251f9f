"""The experiment contract: what a module in ``experiments/`` gives the harness.

Required:

- ``run(ctx)``: measure the claim through a ``RunContext`` (harness/context.py), recording
  with ``ctx.record``; whatever it raises fails the run and nothing is stored.

Optional (registry.load_experiment fills in the default of each one a module leaves out, so
every loaded experiment has all four):

- ``DEFAULT_PARAMS``: a dict of the params ``run`` reads, under the claim's profile params
  (default ``{}``).
- ``engines(params, model, dtype) -> EngineSettings``: the engines ``run`` builds, for
  tpu-check --claims (lab/engines/engine_settings.py); None: one engine with the profile's params.
- ``figures(run_dirs) -> [(title, inline svg)]``: charts for the claim's page, drawn from its
  stored runs (oldest first) with lab/figures; None: no figures.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from claimbench.models.config import ModelConfig

# (merged params, the served model's config or None, the run's dtype) -> lab's EngineSettings
EnginesFunction = Callable[[dict[str, Any], ModelConfig | None, str], Any]
FiguresFunction = Callable[[list[Path]], list[tuple[str, str]]]


class Experiment(Protocol):
    """A loaded experiment module (see the module docstring for each member)."""

    DEFAULT_PARAMS: dict[str, Any]
    engines: EnginesFunction | None
    figures: FiguresFunction | None

    def run(self, ctx: Any) -> None:
        """Measure the claim; ``ctx`` is the run's RunContext."""


def contract_violation(module: Any) -> str | None:
    """What ``module`` lacks or gets wrong against the contract, as one phrase; None if it
    keeps it."""
    if not callable(getattr(module, "run", None)):
        return "defines no run(ctx) function"
    defaults = getattr(module, "DEFAULT_PARAMS", {})
    if not isinstance(defaults, dict):
        return f"DEFAULT_PARAMS must be a dict, got {type(defaults).__name__}"
    for hook in ("engines", "figures"):
        value = getattr(module, hook, None)
        if value is not None and not callable(value):
            return f"{hook} must be a function, got {type(value).__name__}"
    return None


def fill_defaults(module: Any) -> Experiment:
    """``module`` with each optional member it leaves out set to its default."""
    if not hasattr(module, "DEFAULT_PARAMS"):
        module.DEFAULT_PARAMS = {}
    for hook in ("engines", "figures"):
        if not hasattr(module, hook):
            setattr(module, hook, None)
    return module
