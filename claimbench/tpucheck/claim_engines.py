"""The engines each claim's experiment builds at a profile, as EngineConfig options.

A claim's engine is its profile's ``engine`` params over the run's model and dtype (what
``RunContext.engine`` does). An experiment that builds anything else exports ``engines``
(harness/experiment.py's contract, lab/engines/engine_settings.py), the function its own ``run``
builds its engines from; it is called here on the experiment's merged params (its
``DEFAULT_PARAMS`` under the claim's) and the checked model's config, so pools an experiment
sizes from the served model are sized the same way here, and a pool sized from the chip's HBM
(``hbm_utilization``) is sized when compiled. Engines an experiment holds at once share a
``group``; one that frees each engine before building the next gives each its own. tpu-check
--claims compiles each of these for the target chip and sums what each group keeps resident
(tpu_check_claims.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claimbench.engine.config import ModelOptions
from claimbench.harness.claims import Claim
from claimbench.harness.context import merge_params
from claimbench.harness.registry import load_experiment
from claimbench.lab.engines.engine_settings import EngineSettings
from claimbench.lab.speculative.draft_models import DRAFT_PARAM, draft_model_name
from claimbench.models.config import ModelConfig


@dataclass(frozen=True)
class ClaimEngine:
    """One engine a claim's experiment builds."""

    claim_id: str
    setting: str  # "" when the experiment builds one engine
    options: dict[str, Any] = field(default_factory=dict)  # EngineConfig kwargs (no model_path)
    model: str | None = None  # a model of the experiment's own (name or dir); None = the run's
    group: int = 0  # engines of one claim in the same group are resident at once
    # A speculative engine's draft (tpu_check.resolve_model: a preset or a directory), from
    # the experiment's draft_model param; None = the engine's own (the shipped tiny draft).
    draft: str | None = None


def claim_engines(
    root: Path, claim: Claim, profile: str, model_cfg: ModelConfig | None = None
) -> list[ClaimEngine]:
    """Every engine ``claim``'s experiment builds at ``profile`` when serving ``model_cfg``
    (None: pools computed from the served model are left at the claim's params). ValueError
    (one line) for params the experiment would refuse (an unknown key)."""
    params = claim_params(root, claim, profile)
    base = dict(params.get("engine") or {})
    built = experiment_engines(root, claim, params, model_cfg)
    draft = draft_model_name(params.get(DRAFT_PARAM))
    return [
        ClaimEngine(
            claim.id,
            setting,
            base | overrides,
            built.own_model,
            i if built.one_at_a_time else 0,
            draft if overrides.get("speculative") == "draft" else None,
        )
        for i, (setting, overrides) in enumerate(built.settings.items())
    ]


def experiment_engines(
    root: Path, claim: Claim, params: dict[str, Any], model_cfg: ModelConfig | None
) -> EngineSettings:
    """What ``claim``'s experiment's own ``engines`` function returns for ``params`` (in the
    run's dtype: the engine params', else EngineConfig's), or one engine with the profile's
    engine params where it has none."""
    engines = load_experiment(root, claim).engines
    if engines is None:
        return EngineSettings()
    dtype = (params.get("engine") or {}).get("dtype", ModelOptions.dtype)
    settings: EngineSettings = engines(params, model_cfg, dtype)
    return settings


def claim_params(root: Path, claim: Claim, profile: str) -> dict[str, Any]:
    """The experiment's params at ``profile``: its DEFAULT_PARAMS under the claim's."""
    defaults = load_experiment(root, claim).DEFAULT_PARAMS
    return merge_params(defaults, claim.profile_params(profile), f"claim {claim.id!r}")
