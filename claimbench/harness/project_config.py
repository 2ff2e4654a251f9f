"""Project settings kept in claims.yaml beside the claims: the budget, and the full profile's model.

    budget:
      usd: 100                          # what the whole project may spend on metered hardware
      estimate_device_s:                # per profile: a claim's expected device seconds per run,
        full: {default: 1800, kv-int8: 600}   # used until the claim has run on this hardware
      prices:                           # overrides of ledger/prices.py, per chip
        v6e: {usd_per_chip_hour: 2.70, source: <url>, as_of: 2026-11-30}
    full_profile:
      model: {repo: Qwen/Qwen2.5-7B-Instruct, revision: <40-hex commit>, preset: <model_presets>}
    claims:
    - id: ...

A claims.yaml that is a plain list of claims has the defaults: a $100 budget, no full-profile model.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from claimbench.harness.claims import CLAIMS_FILE, PROFILES, ClaimsError

DEFAULT_BUDGET_USD = 100.0
DEFAULT_ESTIMATE_KEY = "default"
_REVISION = re.compile(r"^[0-9a-f]{40}$")


class DeclaredPrice(BaseModel):
    """One chip's on-demand price, with where and when it was read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    usd_per_chip_hour: float = Field(ge=0)
    source: str = Field(min_length=1)  # a URL, or who set the price
    as_of: date


class BudgetSettings(BaseModel):
    """The ``budget:`` block."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    usd: float = Field(default=DEFAULT_BUDGET_USD, gt=0)
    estimate_device_s: dict[str, dict[str, float]] = Field(default_factory=dict)
    prices: dict[str, DeclaredPrice] = Field(default_factory=dict)

    @field_validator("estimate_device_s")
    @classmethod
    def _estimates(cls, value: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        for profile, per_claim in value.items():
            if profile not in PROFILES:
                raise ValueError(f"profile {profile!r} is not one of {', '.join(PROFILES)}")
            for claim_id, seconds in per_claim.items():
                if seconds <= 0:
                    raise ValueError(f"{profile}.{claim_id} must be > 0 seconds, got {seconds}")
        return value

    def declared_device_s(self, claim_id: str, profile: str) -> float | None:
        """The declared device seconds of one run of ``claim_id`` at ``profile``, if any."""
        per_claim = self.estimate_device_s.get(profile, {})
        return per_claim.get(claim_id, per_claim.get(DEFAULT_ESTIMATE_KEY))


class PinnedModel(BaseModel):
    """A Hugging Face Hub checkpoint at one commit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str = Field(pattern=r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
    revision: str  # the full commit sha: a branch or tag could move under the same name
    # The checkpoint's shape in hardware/model_presets.py, so `tpu-check --profile full` compiles
    # exactly this model's step without downloading it.
    preset: str | None = None

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str | None) -> str | None:
        from claimbench.hardware.model_presets import PRESETS

        if value is not None and value not in PRESETS:
            raise ValueError(f"unknown preset {value!r}; expected one of {', '.join(PRESETS)}")
        return value

    @field_validator("revision")
    @classmethod
    def _full_sha(cls, value: str) -> str:
        if not _REVISION.match(value):
            raise ValueError(f"must be a 40-hex commit sha, got {value!r}")
        return value


class FullProfile(BaseModel):
    """The ``full_profile:`` block: what the nightly TPU run serves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: PinnedModel


class ProjectConfig(BaseModel):
    """Every project setting claims.yaml holds besides the claims."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    full_profile: FullProfile | None = None


def load_project_config(root: Path) -> ProjectConfig:
    """The settings of ``<root>/claims.yaml``; ClaimsError (one line) when they are invalid."""
    path = root / CLAIMS_FILE
    if not path.is_file():
        raise ClaimsError(f"no {CLAIMS_FILE} in {root} (use --root to name a claims project)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ClaimsError(f"{CLAIMS_FILE}: not readable YAML ({type(err).__name__})") from None
    if not isinstance(data, dict):
        return ProjectConfig()
    settings = {key: value for key, value in data.items() if key != "claims"}
    try:
        return ProjectConfig.model_validate(settings)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        raise ClaimsError(f"{CLAIMS_FILE}: setting {where!r}: {message}") from None
