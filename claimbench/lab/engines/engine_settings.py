"""The engines an experiment builds: one source for its run and for tpu-check --claims.

An experiment that builds anything but one engine with its profile's ``engine`` params
exports ``engines(params, model, dtype) -> EngineSettings`` (ENGINES_FUNCTION): its merged
params, the served model's config (None where it is not known: settings that need it are
left out) and the run's compute dtype. Its ``run`` builds its engines from that function's
output and claim_engines.py reads the same function, so the engines tpu-check compiles for a
claim cannot drift from the ones its experiment builds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from claimbench.models.config import ModelConfig

ENGINES_FUNCTION = "engines"


@dataclass(frozen=True)
class EngineSettings:
    """The engines of one experiment at one profile, in the order it builds them."""

    # setting name ("" for a lone engine) -> ctx.engine overrides over the profile's engine
    # params (EngineConfig keyword arguments; build flags such as precompile are the run's)
    settings: dict[str, dict[str, Any]] = field(default_factory=lambda: {"": {}})
    # True: each engine is freed before the next is built (precision.each_engine,
    # interleaved_arms.interleaved_trials); False: all are held at once.
    one_at_a_time: bool = False
    # A model the experiment serves instead of the run's (a preset name or a directory).
    own_model: str | None = None

    def __post_init__(self) -> None:
        for name, overrides in self.settings.items():
            if not isinstance(overrides, dict):
                raise ValueError(f"setting {name!r}: overrides must be a dict, got {overrides!r}")


EnginesFunction = Callable[[dict[str, Any], ModelConfig | None, str], EngineSettings]
