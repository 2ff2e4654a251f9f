"""What a stored run's meta.json says about where its evidence came from, for people to read.

Runs stored before provenance grew (no model, origin, prediction hash, CPU model) read as unknown
rather than failing: meta.json is never rewritten, so old runs keep their old keys.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

UNKNOWN = "unknown"


@dataclass(frozen=True)
class RunInfo:
    """A run's provenance, flattened for tables: hardware, model, profile, trials, date, origin."""

    run_id: str
    end: str | None  # ISO time the run finished
    profile: str
    trials: int | None
    origin: str | None  # host name or CLAIMBENCH_ORIGIN; None before runs recorded it
    platform: str | None  # cpu | gpu | tpu
    hardware: str  # chip (device kind x count) or CPU model
    model_name: str | None
    model_sha: str | None  # short digest of the weight files' sha256s
    model_params: int | None  # parameters stored in the model's weight files
    git_sha: str | None
    prediction_hash: str | None
    # The stopping rule when the run chose its trial count by its evidence (run
    # --until-decided), else None: a fixed count. harness/run_checks refuses a malformed one.
    stopping_rule: str | None = None
    stop_reason: str | None = None

    @property
    def sequential(self) -> bool:
        return self.stopping_rule is not None

    @property
    def date(self) -> str:
        """``2026-11-29`` (UTC) from ``end``, or "unknown"."""
        when = parse_time(self.end)
        return when.strftime("%Y-%m-%d") if when else UNKNOWN

    @property
    def hardware_label(self) -> str:
        """``tpu · TPU v6e lite x1`` or ``cpu · AMD EPYC 7B13``."""
        return f"{self.platform or UNKNOWN} · {self.hardware}"

    @property
    def model_label(self) -> str:
        """``claimbench-tiny @3f2a9c1d (4.2M params)`` (or "unknown"): the size says which
        model class its evidence speaks for (evidence_rules.MODEL_CLASSES)."""
        if self.model_name is None:
            return UNKNOWN
        label = f"{self.model_name} @{self.model_sha}" if self.model_sha else self.model_name
        return (
            f"{label} ({format_params(self.model_params)} params)" if self.model_params else label
        )

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> RunInfo:
        """Read a meta.json mapping; missing or malformed keys become None / "unknown"."""
        hw = meta.get("hardware") if isinstance(meta.get("hardware"), dict) else {}
        git = meta.get("git") if isinstance(meta.get("git"), dict) else {}
        name, sha = _model(meta.get("model"))
        trials = meta.get("trials")
        return cls(
            run_id=str(meta.get("run_id", "")),
            end=str(meta["end"]) if meta.get("end") else None,
            profile=str(meta.get("profile") or UNKNOWN),
            trials=trials if isinstance(trials, int) else None,
            origin=str(meta["origin"]) if meta.get("origin") else None,
            platform=str(hw["platform"]) if hw.get("platform") else None,
            hardware=_hardware(hw),
            model_name=name,
            model_sha=sha,
            model_params=_num_params(meta.get("model")),
            git_sha=str(git["sha"])[:10] if git.get("sha") else None,
            prediction_hash=str(meta["prediction_hash"]) if meta.get("prediction_hash") else None,
            stopping_rule=_stopping(meta, "rule"),
            stop_reason=_stopping(meta, "reason"),
        )


def _stopping(meta: dict[str, Any], key: str) -> str | None:
    stopping = meta.get("stopping")
    if not isinstance(stopping, dict):
        return None
    return str(stopping[key]) if stopping.get(key) else None


def format_params(count: int) -> str:
    """``4.2M``, ``7.6B``: a parameter count for people."""
    if count >= 10**9:
        return f"{count / 1e9:.1f}B"
    if count >= 10**6:
        return f"{count / 1e6:.1f}M"
    return f"{count:,}"


def parse_time(iso: str | None) -> datetime | None:
    """An aware datetime from an ISO string (naive means UTC); None if absent or unparseable."""
    if not iso:
        return None
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _hardware(hw: dict[str, Any]) -> str:
    if hw.get("platform") == "cpu":
        return str(hw.get("cpu_model") or "CPU model unknown")
    kind = hw.get("chip") or hw.get("device_kind")
    if not kind:
        return UNKNOWN
    count = hw.get("device_count")
    return f"{kind} x{count}" if count else str(kind)


def _model(model: Any) -> tuple[str | None, str | None]:
    """(name, short weights digest) from meta's ``model``: None, a path string (older runs),
    or {"name", "path", "architecture", "weights_sha256": {file: sha}}."""
    if isinstance(model, str):
        return Path(model).name, None
    if not isinstance(model, dict):
        return None, None
    name = model.get("name") or (Path(str(model["path"])).name if model.get("path") else None)
    name = str(name) if name is not None else None  # a garbled record reads, never crashes
    shas = model.get("weights_sha256")
    if not isinstance(shas, dict) or not shas:
        return name, None
    if len(shas) == 1:
        return name, str(next(iter(shas.values())))[:8]
    # Several weight files: one digest over all of them, in file order, so it names the set.
    joined = "\n".join(f"{file}:{sha}" for file, sha in sorted(shas.items()))
    return name, hashlib.sha256(joined.encode()).hexdigest()[:8]


def _num_params(model: Any) -> int | None:
    """The parameter count meta's ``model`` recorded (architecture.num_params), else None."""
    arch = model.get("architecture") if isinstance(model, dict) else None
    count = arch.get("num_params") if isinstance(arch, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None
