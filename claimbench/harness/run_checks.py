"""Which stored runs may be scored: measured against today's prediction and today's design, from a
committed tree, with the provenance their kind of run must carry.

A run that fails a check is kept and listed with the reason (EXCLUSIONS); it never decides a
verdict. The checks, in the order a run is reported by the first it fails:

- record: every provenance field the scorer relies on is present and well-formed
  (provenance_gaps): the profile, the prediction and design hashes, a git record naming a commit
  (dirtiness unknown only for an exported tree), the hardware class (the class of the evidence
  scored, agreeing with the recorded device), a model record beside any engine, and for each
  model the run used, its weight hashes and an integer parameter count, and readable run times;
  its measurements' labels readable and, for a load-controlled run, every trial's realised load
  (measurement_gaps); its params the profile's that its prediction hash names. A run copied with
  a key deleted, garbled or edited cannot be tied to what it measured, so it is listed with what
  is missing;
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

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from claimbench.harness.claims import PROFILES, Claim
from claimbench.harness.condition_scores import labels_of
from claimbench.harness.design import design_of, source_root_of
from claimbench.harness.evidence_rules import ANALYTIC, MEASURED, REALISED_LOAD
from claimbench.harness.registry import experiment_path
from claimbench.harness.run_info import parse_time
from claimbench.harness.stopping import SEQUENTIAL, STOP_REASONS

EARLIER_PREDICTION = "measured against an earlier prediction"
EARLIER_DESIGN = "measured with an earlier design"
DIRTY_TREE = "measured from a tree with uncommitted changes"
MISSING_DRAFT_HASH = "lacks the draft model's weight hashes"
MISSING_PROVENANCE = "lacks provenance"  # shown with what is missing: "lacks provenance: git sha"
EXCLUSIONS = (
    MISSING_PROVENANCE,
    EARLIER_PREDICTION,
    EARLIER_DESIGN,
    DIRTY_TREE,
    MISSING_DRAFT_HASH,
)
_HEX = re.compile(r"^[0-9a-f]+$")
LOAD_MODULE = "claimbench.lab.load.open_loop"  # records a trial's realised load


def today_designs(root: Path, claims: list[Claim]) -> dict[str, str]:
    """claim id -> the design hash of its experiment as it stands under ``root``; a claim
    without an experiment file, or whose design does not parse, has none (so no run of it is
    of today's design)."""
    designs = {}
    source_root = source_root_of(root)
    for claim in claims:
        path = experiment_path(root, claim)
        if not path.is_file():
            continue
        try:
            designs[claim.id] = design_of(path, source_root).hash
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


def _is_hex(value: Any, length: int | None = None) -> bool:
    return (
        isinstance(value, str)
        and bool(_HEX.match(value))
        and (len(value) == length if length else len(value) >= 7)
    )


def _model_gaps(model: Any, label: str) -> list[str]:
    """What a recorded model lacks: a mapping of weight files to sha256s, an integer size."""
    if not isinstance(model, dict):
        return [f"{label} record"]
    gaps = []
    shas = model.get("weights_sha256")
    if not (isinstance(shas, dict) and shas and all(_is_hex(v, 64) for v in shas.values())):
        gaps.append(f"{label} weight hashes")
    arch = model.get("architecture")
    count = arch.get("num_params") if isinstance(arch, dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        gaps.append(f"{label} parameter count")
    return gaps


def _is_stopping_record(stopping: Any, trials: Any) -> bool:
    """Whether a sequential run's ``stopping`` record is whole: its rule, why it stopped, and
    the trials it ran, the run's own count (the scorer picks its intervals by it)."""
    return (
        isinstance(stopping, dict)
        and stopping.get("rule") == SEQUENTIAL
        and stopping.get("reason") in STOP_REASONS
        and isinstance(stopping.get("num_trials"), int)
        and stopping.get("num_trials") == trials
    )


def _device_disagrees(hardware: dict[str, Any]) -> bool:
    """Whether the recorded platform and device disagree: a CPU run names another device, or
    an accelerator run names the CPU as its device or attention backend."""
    kind = hardware.get("device_kind")
    if hardware.get("platform") == "cpu":
        return kind not in (None, "cpu")
    return kind == "cpu" or hardware.get("attention_backend") == "cpu"


def _engine_models(meta: dict[str, Any]) -> list[Any]:
    """The model paths of the engines the run built (each must be hashed among its models)."""
    configs = meta.get("engine_configs") or []
    if not isinstance(configs, list):
        return ["?"]
    return [c.get("model_path") for c in configs if isinstance(c, dict) and c.get("model_path")]


def provenance_gaps(meta: dict[str, Any], evidence: str | None = None) -> list[str]:
    """The provenance fields the scorer relies on that ``meta`` lacks or holds in the wrong
    form ([] when complete). ``evidence``: the class being scored (a measured class must be
    the hardware's platform)."""
    gaps = []
    if not isinstance(meta.get("profile"), str):
        gaps.append("profile")
    if not _is_hex(meta.get("prediction_hash")):
        gaps.append("prediction hash")
    if not _is_hex(meta.get("design_hash")):
        gaps.append("design hash")
    git = meta.get("git")
    if not isinstance(git, dict) or not _is_hex(git.get("sha")):
        gaps.append("git commit")
    elif git.get("dirty") not in (True, False) and not (
        git.get("dirty") is None and git.get("exported") is True
    ):
        gaps.append("git dirty flag")
    hardware = meta.get("hardware")
    platform = hardware.get("platform") if isinstance(hardware, dict) else None
    if not isinstance(platform, str) or platform not in MEASURED:
        gaps.append("hardware class")
    elif evidence not in (None, ANALYTIC) and platform != evidence:
        gaps.append(f"hardware class ({platform} run holding {evidence} evidence)")
    elif _device_disagrees(hardware):
        gaps.append(f"hardware class ({platform} run on a {hardware.get('device_kind')} device)")
    if "model" not in meta or (meta["model"] is None and _engine_models(meta)):
        gaps.append("model record")
    elif meta["model"] is not None:
        gaps.extend(_model_gaps(meta["model"], "model"))
    if "stopping" in meta and not _is_stopping_record(meta["stopping"], meta.get("trials")):
        gaps.append("stopping rule")
    if any(parse_time(meta.get(key)) is None for key in ("start", "end")):
        gaps.append("run times")
    others = meta.get("other_models")
    if others is not None:
        if not isinstance(others, list):
            gaps.append("other models record")
        else:
            for i, other in enumerate(others):
                gaps.extend(_model_gaps(other, f"other model {i}"))
    return gaps


def measurement_gaps(meta: dict[str, Any], rows: pd.DataFrame) -> list[str]:
    """What in a run's measured ``rows`` its meta does not vouch for ([] when nothing): trials
    outside the ``trials`` it ran, and values that are not finite (a recorded value is a
    number; an infinity would decide a condition on nothing)."""
    measured = rows[rows["evidence"] != ANALYTIC]
    if measured.empty:
        return []
    gaps = []
    trials = meta.get("trials")
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        return ["trial count"]
    outside = sorted({int(t) for t in measured["trial"] if not 0 <= t < trials})
    if outside:
        shown = ", ".join(str(t) for t in outside[:3]) + (", ..." if len(outside) > 3 else "")
        gaps.append(f"trials {shown} outside the run's {trials}")
    values = pd.to_numeric(measured["value"], errors="coerce")
    bad = sorted(set(measured.loc[~np.isfinite(values.to_numpy(dtype=float)), "metric"]))
    if bad:
        gaps.append(f"non-finite values of {', '.join(bad)}")
    unreadable = sorted(
        {
            m
            for m, text in zip(rows["metric"], rows["labels"], strict=True)
            if labels_of(text) is None
        }
    )
    if unreadable:
        gaps.append(f"unreadable labels of {', '.join(unreadable)}")
    if _load_controlled(meta, measured):
        loaded = set(measured.loc[measured["metric"] == REALISED_LOAD, "trial"])
        missing = sorted({int(t) for t in measured["trial"]} - {int(t) for t in loaded})
        if missing:
            shown = ", ".join(str(t) for t in missing[:3]) + (", ..." if len(missing) > 3 else "")
            gaps.append(f"realised load of trials {shown}")
    return gaps


def _load_controlled(meta: dict[str, Any], measured: pd.DataFrame) -> bool:
    """Whether the run's load was set in service units, so every trial must record the load it
    really offered: its design reads the realised-load module, or some trial recorded one."""
    modules = meta.get("design_modules")
    listed = isinstance(modules, dict | list) and LOAD_MODULE in modules
    return listed or bool((measured["metric"] == REALISED_LOAD).any())


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def exclusion(
    claim: Claim,
    meta: dict[str, Any],
    designs: Mapping[str, str] | None,
    evidence: str | None = None,
    rows: pd.DataFrame | None = None,
) -> str | None:
    """Why the run may not be scored (one of EXCLUSIONS; MISSING_PROVENANCE followed by what is
    missing), or None when it may.

    ``designs`` maps claim ids to today's design hashes (today_designs); None skips the design
    comparison, for callers that score runs without the experiments at hand (a design hash must
    still be recorded). ``evidence``: the class being scored, checked against the hardware.
    ``rows``: the run's measurements of the claim, checked against its meta (measurement_gaps).
    """
    gaps = provenance_gaps(meta, evidence)
    if rows is not None:
        gaps += measurement_gaps(meta, rows)
    if gaps:
        return f"{MISSING_PROVENANCE}: {', '.join(gaps)}"
    profile = meta["profile"]
    if profile not in PROFILES or meta["prediction_hash"] != claim.prediction_hash(profile):
        return EARLIER_PREDICTION
    if _canonical(meta.get("params")) != _canonical(claim.profile_params(profile)):
        return f"{MISSING_PROVENANCE}: params (not the profile's, which its prediction hash names)"
    if designs is not None and meta["design_hash"] != designs.get(claim.id):
        return EARLIER_DESIGN
    if meta["git"].get("dirty") is True:
        return DIRTY_TREE
    if lacks_draft_hash(meta):
        return MISSING_DRAFT_HASH
    return None
