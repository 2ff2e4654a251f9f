"""The claims file: its schema, and a loader whose every rejection is one line."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from claimbench.harness.evidence_rules import MODEL_CLASSES

CLAIMS_FILE = "claims.yaml"
EXPERIMENTS_DIR = "experiments"
PROFILES = ("quick", "full")
# Top-level keys claims.yaml may hold beside `claims:` (read by harness/project_config.py).
SETTINGS_KEYS = ("budget", "full_profile")
OPS = (">=", ">", "<=", "<")
SCOPES = ("any", "tpu", "accelerator")
BASES = ("measured", "analytic")
CLAIM_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ClaimsError(ValueError):
    """A claims file that cannot be used; the message is one line naming the claim and field."""


class Condition(BaseModel):
    """One predicted inequality on a metric the experiment records: ``metric op value``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str = Field(min_length=1)
    op: Literal[">=", ">", "<=", "<"]
    value: float
    # measured: decided by trials on hardware in the claim's scope. analytic: the metric is
    # arithmetic on a model config, a pool layout or a chip spec, recorded once with its inputs
    # (RunContext.record_analytic), and only analytic evidence decides it.
    basis: Literal["measured", "analytic"] = "measured"
    # The model class the condition's mechanism depends on (evidence_rules.MODEL_CLASSES): only
    # measurements of a model of that class decide it. None: any model's measurements decide.
    # An evidence rule like the claim's scope, not part of the prediction (nor of its hash).
    model_class: str | None = None

    @field_validator("model_class")
    @classmethod
    def _known_class(cls, value: str | None) -> str | None:
        if value is not None and value not in MODEL_CLASSES:
            raise ValueError(f"must be one of {sorted(MODEL_CLASSES)}, got {value!r}")
        return value

    def holds(self, x: float) -> bool:
        """Whether ``x`` satisfies the condition."""
        if self.op == ">=":
            return x >= self.value
        if self.op == ">":
            return x > self.value
        if self.op == "<=":
            return x <= self.value
        return x < self.value

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}"


class Claim(BaseModel):
    """One falsifiable claim: what is predicted, how confidently, and how it is measured."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    part: int = Field(ge=1)
    title: str = Field(min_length=1)
    statement: str = Field(min_length=1)
    confidence: float
    scope: Literal["any", "tpu", "accelerator"]
    # One sentence: which hardware's physics the mechanism depends on, hence the scope.
    scope_reason: str = ""
    prediction: list[Condition] = Field(min_length=1)
    refuted_if: str = Field(min_length=1)
    params: dict[Literal["quick", "full"], dict[str, Any]] = Field(default_factory=dict)
    experiment: str | None = None  # module in experiments/; None = id with "-" -> "_"

    @field_validator("id")
    @classmethod
    def _kebab_case(cls, value: str) -> str:
        if not CLAIM_ID.match(value):
            raise ValueError(f"must be kebab-case (lowercase letters, digits, '-'), got {value!r}")
        return value

    @field_validator("confidence")
    @classmethod
    def _probability(cls, value: float) -> float:
        # 0 and 1 are certainties: they make the log score infinite and cannot be calibrated.
        if not 0.0 < value < 1.0:
            raise ValueError(f"must be strictly between 0 and 1, got {value}")
        return value

    @field_validator("experiment")
    @classmethod
    def _module_name(cls, value: str | None) -> str | None:
        if value is not None and not MODULE_NAME.match(value):
            raise ValueError(f"must be a Python module name in experiments/, got {value!r}")
        return value

    @property
    def module_name(self) -> str:
        """The experiment module's name: ``experiment`` if given, else the id with - -> _."""
        return self.experiment or self.id.replace("-", "_")

    def prediction_hash(self, profile: str) -> str:
        """sha256 (hex, first 16) of what a run of ``profile`` is measured against: the
        conditions (metric, op, value, basis), the confidence and the profile's params.

        Stored with every run; a run whose hash differs from today's claims.yaml was measured
        against an earlier prediction and is shown, not scored (its design has a hash of its own:
        harness/design.py).
        """
        payload = {
            "prediction": [c.model_dump(exclude={"model_class"}) for c in self.prediction],
            "confidence": self.confidence,
            "params": self.profile_params(profile),
        }
        text = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def profile_params(self, profile: str) -> dict[str, Any]:
        """The experiment knobs for ``profile`` (empty when the claim gives none)."""
        if profile not in PROFILES:
            raise ValueError(f"profile {profile!r} is not one of {PROFILES}")
        return dict(self.params.get(profile, {}))


def _field_path(loc: tuple[int | str, ...]) -> str:
    """Pydantic's error location as ``prediction[1].op``."""
    path = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker for "the key itself", not a field
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _claim_label(entry: Any, index: int) -> str:
    if isinstance(entry, dict) and isinstance(entry.get("id"), str):
        return repr(entry["id"])
    return f"#{index + 1}"


def _parse(entry: Any, index: int, source: str) -> Claim:
    label = _claim_label(entry, index)
    if not isinstance(entry, dict):
        raise ClaimsError(f"{source}: claim {label}: must be a mapping, got {type(entry).__name__}")
    try:
        return Claim.model_validate(entry)
    except ValidationError as err:
        first = err.errors()[0]
        field = _field_path(first["loc"]) or "(claim)"
        message = first["msg"].removeprefix("Value error, ")
        raise ClaimsError(f"{source}: claim {label}: field {field!r}: {message}") from None


def load_claims(root: Path) -> list[Claim]:
    """Read and validate ``<root>/claims.yaml``.

    Raises ClaimsError (one line naming the claim and the field) for a missing file, bad YAML, a
    schema violation (unknown op, confidence outside (0, 1), condition without metric, ...), a
    duplicate id, or an ``experiment:`` that names a module missing from ``<root>/experiments``.
    """
    path = root / CLAIMS_FILE
    source = CLAIMS_FILE
    if not path.is_file():
        raise ClaimsError(f"no {CLAIMS_FILE} in {root} (use --root to name a claims project)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ClaimsError(f"{source}: not valid YAML{where}: {problem}") from None
    except UnicodeDecodeError as err:
        raise ClaimsError(f"{source}: not UTF-8 text ({err.reason})") from None
    if isinstance(data, dict) and "claims" in data:
        # The mapping form: project settings (budget, full_profile: project_config.py) beside
        # the list of claims.
        unknown = sorted(set(data) - {"claims", *SETTINGS_KEYS})
        if unknown:
            raise ClaimsError(
                f"{source}: unknown top-level key(s) {unknown}; known: claims, "
                f"{', '.join(SETTINGS_KEYS)}"
            )
        data = data["claims"]
    if not isinstance(data, list) or not data:
        kind = type(data).__name__
        raise ClaimsError(f"{source}: must be a non-empty list of claims, got {kind}")

    claims: list[Claim] = []
    seen: set[str] = set()
    for index, entry in enumerate(data):
        claim = _parse(entry, index, source)
        if claim.id in seen:
            raise ClaimsError(f"{source}: claim {claim.id!r}: field 'id': duplicate id")
        seen.add(claim.id)
        if claim.experiment is not None:
            module = root / EXPERIMENTS_DIR / f"{claim.experiment}.py"
            if not module.is_file():
                raise ClaimsError(
                    f"{source}: claim {claim.id!r}: field 'experiment': "
                    f"{EXPERIMENTS_DIR}/{claim.experiment}.py does not exist"
                )
        claims.append(claim)
    return claims


def find_claim(claims: list[Claim], claim_id: str) -> Claim:
    """The claim with ``claim_id``; ValueError when there is none."""
    for claim in claims:
        if claim.id == claim_id:
            return claim
    raise ValueError(f"no claim {claim_id!r} in {CLAIMS_FILE} (see `claimbench list`)")
