"""Which stored runs may be scored: measured against today's prediction and today's design, from a
committed tree, with the provenance their kind of run must carry.

A run that fails a check is kept and listed with the reason (EXCLUSIONS); it never decides a
verdict. The checks, in the order a run is reported by the first it fails:

- prediction: its ``prediction_hash`` equals ``claim.prediction_hash(profile)`` (thresholds,
  confidence and params as they stand today);
- design: its ``design_hash`` equals the experiment's design today (harness/design.py), so a run
  of a superseded experiment or helper is not scored as if it measured the current one;
- tree: ``git.dirty`` is not true; a run from uncommitted code cannot be tied to any commit
  (an exported tree records dirty as unknown, which passes: its commit is recorded);
- provenance: a run that built a speculative engine with a draft model records the draft's
  weight hashes among its models, since the draft shapes what speculation measures.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from claimbench.harness.claims import PROFILES, Claim
from claimbench.harness.design import design_of
from claimbench.harness.registry import experiment_path

EARLIER_PREDICTION = "measured against an earlier prediction"
EARLIER_DESIGN = "measured with an earlier design"
DIRTY_TREE = "measured from a tree with uncommitted changes"
MISSING_DRAFT_HASH = "lacks the draft model's weight hashes"
EXCLUSIONS = (EARLIER_PREDICTION, EARLIER_DESIGN, DIRTY_TREE, MISSING_DRAFT_HASH)


def today_designs(root: Path, claims: list[Claim]) -> dict[str, str]:
    """claim id -> the design hash of its experiment as it stands under ``root``; a claim
    without an experiment file, or whose design does not parse, has none (so no run of it is
    of today's design)."""
    designs = {}
    for claim in claims:
        path = experiment_path(root, claim)
        if not path.is_file():
            continue
        try:
            designs[claim.id] = design_of(path).hash
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue  # an experiment that cannot be read cannot have produced today's runs
    return designs


def _models(meta: dict[str, Any]) -> list[dict[str, Any]]:
    found = [meta.get("model"), *(meta.get("other_models") or [])]
    return [m for m in found if isinstance(m, dict)]


def lacks_draft_hash(meta: dict[str, Any]) -> bool:
    """Whether the run built a draft-model speculative engine without recording the draft's
    weight hashes (a configured draft path must be one of the hashed models' paths)."""
    configs = [c for c in meta.get("engine_configs") or [] if isinstance(c, dict)]
    drafts = [c for c in configs if c.get("speculative") == "draft"]
    if not drafts:
        return False
    hashed = [m for m in _models(meta)[1:] if m.get("weights_sha256")]
    paths = {str(Path(str(m.get("path"))).resolve()) for m in hashed if m.get("path")}
    for config in drafts:
        path = config.get("draft_model_path")
        if path is None:
            if not hashed:  # the shipped draft: some other model must be hashed
                return True
        elif str(Path(str(path)).resolve()) not in paths:
            return True
    return False


def exclusion(claim: Claim, meta: dict[str, Any], designs: Mapping[str, str] | None) -> str | None:
    """Why the run may not be scored (one of EXCLUSIONS), or None when it may.

    ``designs`` maps claim ids to today's design hashes (today_designs); None skips the design
    check, for callers that score runs without the experiments at hand.
    """
    profile = meta.get("profile")
    if profile not in PROFILES or meta.get("prediction_hash") != claim.prediction_hash(profile):
        return EARLIER_PREDICTION
    if designs is not None:
        recorded = meta.get("design_hash")
        if recorded is None or recorded != designs.get(claim.id):
            return EARLIER_DESIGN
    git = meta.get("git")
    if isinstance(git, dict) and git.get("dirty") is True:
        return DIRTY_TREE
    if lacks_draft_hash(meta):
        return MISSING_DRAFT_HASH
    return None
