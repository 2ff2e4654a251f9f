"""What would decide a claim, and why evidence at hand only indicates it.

A claim is decided by a run on hardware of its scope (evidence_rules.IN_SCOPE) and, for each
condition about a model class (``model_class`` in claims.yaml), on a model of that class
(evidence_rules.in_model_class). Both are stated on the claim's page beside the command that
would produce such a run, so an undecided claim says what it is waiting for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from claimbench.harness import stopping
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


AFFORDABLE_TRIALS = 100  # past this many trials in all, a condition is "too close to call"


@dataclass(frozen=True)
class TrialsNeeded:
    """About how many trials would decide an unclear condition, were its estimate and spread
    to stay as observed: the least n whose confidence sequence clears the threshold."""

    metric: str
    num_trials: int  # trials in the scored run
    estimate: float  # on the scale the interval works in (the logs for a ratio)
    threshold: float  # on that scale
    sd: float  # the trial values' standard deviation, on that scale
    needed: int | None  # trials in all; None: none up to 10,000 would
    log_space: bool

    @property
    def too_close(self) -> bool:
        return self.needed is None or self.needed > AFFORDABLE_TRIALS

    def describe(self) -> str:
        """The estimate, the calculation and its answer in one sentence."""
        space = "log " if self.log_space else ""
        gap = abs(self.estimate - self.threshold)
        calc = (
            f"{space}estimate {self.estimate:.4g} against {space}threshold "
            f"{self.threshold:.4g} (gap {gap:.3g}), trial sd {self.sd:.3g} over "
            f"{self.num_trials} trials; a confidence sequence clears the gap once "
            "c_n * sd / sqrt(n) < gap"
        )
        if self.too_close:
            return (
                f"{self.metric}: {calc}, which takes more than {AFFORDABLE_TRIALS} trials: "
                "too close to call at this precision"
            )
        more = max(self.needed - self.num_trials, 0)
        return f"{self.metric}: {calc}, at n = {self.needed}: about {more} more trial(s)"


def trials_needed(score: ClaimScore) -> tuple[TrialsNeeded, ...]:
    """For each in-scope measured condition an inconclusive claim's scored run leaves unclear,
    about how many trials would decide it (stopping.trials_to_decide)."""
    if score.verdict != "inconclusive":
        return ()
    needs = []
    for cs in score.conditions:
        if cs.status != "unclear" or not cs.in_scope or cs.condition.basis != "measured":
            continue
        values = np.asarray(cs.trial_values, dtype=np.float64)
        if values.size < 2:
            continue
        threshold = cs.condition.value
        log_space = cs.method in ("log-t", "log-cs") and threshold > 0
        if log_space:
            values, threshold = np.log(values), math.log(threshold)
        estimate, sd = float(values.mean()), float(values.std(ddof=1))
        needed = stopping.trials_to_decide(estimate, sd, values.size, threshold)
        needs.append(
            TrialsNeeded(
                cs.condition.metric, values.size, estimate, threshold, sd, needed, log_space
            )
        )
    return tuple(needs)
