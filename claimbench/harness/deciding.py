"""What would decide a claim, and why evidence at hand only indicates it.

A claim is decided by a run on hardware of its scope (evidence_rules.IN_SCOPE) and, for each
condition about a model class (``model_class`` in claims.yaml), on a model of that class
(evidence_rules.in_model_class). Both are stated on the claim's page beside the command that
would produce such a run, so an undecided claim says what it is waiting for.
"""

from __future__ import annotations

from dataclasses import dataclass

from claimbench.harness.claims import Claim
from claimbench.harness.evidence_rules import IN_SCOPE, MEASURED, MODEL_CLASSES
from claimbench.harness.scoring import ClaimScore

INDICATIVE_OUT_OF_SCOPE = "outside the claim's scope"


@dataclass(frozen=True)
class Deciding:
    """The evidence that would decide a claim."""

    hardware: tuple[str, ...]  # measured classes in the claim's scope, MEASURED order
    model_classes: tuple[str, ...]  # classes its conditions name, MODEL_CLASSES order
    command: str  # the run that would produce such evidence

    def describe(self) -> str:
        """One sentence for people: the hardware, the model and the command."""
        hardware = " or ".join(self.hardware)
        model = (
            f"a model of the {' or '.join(self.model_classes)} class"
            if self.model_classes
            else "any model"
        )
        return f"a full-profile run on {hardware} hardware, of {model}: {self.command}"


def what_decides(claim: Claim) -> Deciding:
    """The hardware classes, model classes and command that would decide ``claim``."""
    hardware = tuple(c for c in MEASURED if c in IN_SCOPE[claim.scope])
    named = {c.model_class for c in claim.prediction if c.model_class}
    classes = tuple(c for c in MODEL_CLASSES if c in named)
    command = f"claimbench run --claim {claim.id} --profile full"
    if classes:
        command += f" --model <a {classes[0]}-class model directory>"
    return Deciding(hardware, classes, command)


def indicative_reason(score: ClaimScore) -> str:
    """Why an indicative-only verdict is only indicative ("" for any other verdict): its
    hardware is outside the scope, else the model measured is not of a condition's class."""
    if score.verdict != "indicative-only":
        return ""
    if score.headline is None:
        shown = score.shown.evidence if score.shown else "no"
        return f"{shown} evidence, {INDICATIVE_OUT_OF_SCOPE} ({score.claim.scope})"
    notes = [cs.scope_note for cs in score.conditions if not cs.in_scope and cs.scope_note]
    return notes[0] if notes else INDICATIVE_OUT_OF_SCOPE
