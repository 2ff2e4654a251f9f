"""The results store: append-only run directories of meta.json + Parquet, written atomically.

    results/runs/<run_id>/meta.json
                         /measurements.parquet   one row per recorded value
                         /requests.parquet       the engine's per-request records (may be empty)
                         /steps.parquet          the engine's per-step records (may be empty)

A run is written to ``runs/.tmp-<run_id>`` and renamed into place, so a reader never sees half a
run and an interrupted write leaves no run directory. Nothing here overwrites or deletes a run.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

RUNS_DIR = "runs"
SCORES_FILE = "scores.parquet"
META_FILE = "meta.json"
MEASUREMENTS_FILE = "measurements.parquet"
FRAME_NAMES = ("requests", "steps")
TMP_PREFIX = ".tmp-"
MEASUREMENT_COLUMNS = (
    "run_id",
    "claim_id",
    "trial",  # 0-based
    "metric",
    "value",
    "unit",
    "evidence",  # hardware class: cpu | gpu | tpu | analytic
    "labels",  # JSON object of the record's labels
)
META_KEYS = ("run_id", "claim", "profile", "seed", "trials", "start", "end", "hardware")
# Files the store itself keeps at the top of results/; anything else there is foreign.
# The ledger (its row files, the single file of earlier stores) and its lock file are
# ledger/ledger.py's (LEDGER_DIR, LEDGER_FILE, LOCK_FILE).
# peers/: side-by-side engine comparisons (bench/peers.py), beside the runs.
_OWN_TOP_LEVEL = {
    RUNS_DIR,
    SCORES_FILE,
    ".gitkeep",
    "ledger",
    "ledger.parquet",
    ".ledger.lock",
    "peers",
}
# Where `bench` wrote its records before it got its own <root>/bench/ directory.
_OLD_BENCH_DIR = "bench"
_OLD_BENCH_REASON = (
    "bench records from an earlier claimbench, not runs; bench now writes to <root>/bench/ "
    "(move this there or delete it)"
)


def new_run_id(claim_id: str, start: datetime) -> str:
    """A run id that sorts by start time: ``20261129T101500Z-kv-int8-ab12``."""
    stamp = start.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{claim_id}-{secrets.token_hex(2)}"


def write_run(
    results_dir: Path,
    meta: dict[str, Any],
    measurements: pd.DataFrame,
    frames: dict[str, pd.DataFrame],
) -> Path:
    """Store one finished run atomically and return its directory.

    ``meta["run_id"]`` names the directory; ``measurements`` has MEASUREMENT_COLUMNS; ``frames``
    maps each of FRAME_NAMES to a DataFrame (missing ones are stored empty). Raises
    FileExistsError rather than overwrite a run; on any error (Ctrl-C included) the temporary
    directory is removed and nothing is left behind.
    """
    run_id = meta["run_id"]
    missing = set(MEASUREMENT_COLUMNS) - set(measurements.columns)
    if missing:
        raise ValueError(f"measurements lack columns {sorted(missing)}")
    unknown = set(frames) - set(FRAME_NAMES)
    if unknown:
        raise ValueError(f"unknown frames {sorted(unknown)}; expected {FRAME_NAMES}")
    runs = results_dir / RUNS_DIR
    runs.mkdir(parents=True, exist_ok=True)
    final = runs / run_id
    if final.exists():
        raise FileExistsError(f"run {run_id} already exists in {runs}; runs are never overwritten")
    tmp = runs / f"{TMP_PREFIX}{run_id}"
    try:
        tmp.mkdir()
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n")
        measurements.loc[:, list(MEASUREMENT_COLUMNS)].to_parquet(
            tmp / MEASUREMENTS_FILE, index=False
        )
        for name in FRAME_NAMES:
            frames.get(name, pd.DataFrame()).to_parquet(tmp / f"{name}.parquet", index=False)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


@dataclass(frozen=True)
class StoredRun:
    """One readable run directory."""

    path: Path
    meta: dict[str, Any]
    measurements: pd.DataFrame  # MEASUREMENT_COLUMNS

    @property
    def run_id(self) -> str:
        return self.meta["run_id"]

    @property
    def claim_id(self) -> str:
        return self.meta["claim"]

    def frame(self, name: str) -> pd.DataFrame:
        """The run's ``requests`` or ``steps`` frame."""
        if name not in FRAME_NAMES:
            raise ValueError(f"unknown frame {name!r}; expected {FRAME_NAMES}")
        return pd.read_parquet(self.path / f"{name}.parquet")


@dataclass(frozen=True)
class Skipped:
    """A path under results/ that is not a readable run, and why."""

    path: Path
    reason: str


def _read_run(path: Path) -> StoredRun:
    """Parse one run directory; ValueError with the reason if it is not a valid run."""
    try:
        meta = json.loads((path / META_FILE).read_text())
    except FileNotFoundError:
        raise ValueError(f"no {META_FILE}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{META_FILE} is not valid JSON ({err})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{META_FILE} is not a JSON object")
    missing = [key for key in META_KEYS if key not in meta]
    if missing:
        raise ValueError(f"{META_FILE} lacks {missing}")
    if meta["run_id"] != path.name:
        raise ValueError(f"{META_FILE} names run {meta['run_id']!r}, not {path.name!r}")
    try:
        measurements = pd.read_parquet(path / MEASUREMENTS_FILE)
    except FileNotFoundError:
        raise ValueError(f"no {MEASUREMENTS_FILE}") from None
    except Exception as err:  # pyarrow raises several types for a corrupt file
        raise ValueError(f"{MEASUREMENTS_FILE} is unreadable ({type(err).__name__})") from None
    missing = [c for c in MEASUREMENT_COLUMNS if c not in measurements.columns]
    if missing:
        raise ValueError(f"{MEASUREMENTS_FILE} lacks columns {missing}")
    for name in FRAME_NAMES:
        if not (path / f"{name}.parquet").is_file():
            raise ValueError(f"no {name}.parquet")
    measurements = measurements.astype({"trial": "int64", "value": "float64"})
    return StoredRun(path=path, meta=meta, measurements=measurements)


def read_runs(results_dir: Path) -> tuple[list[StoredRun], list[Skipped]]:
    """Every readable run under ``results_dir`` (oldest first), and every path it skipped.

    Foreign files, leftovers of an interrupted write and corrupt runs are reported as Skipped,
    never touched.
    """
    runs: list[StoredRun] = []
    skipped: list[Skipped] = []
    if not results_dir.is_dir():
        return runs, skipped
    for entry in sorted(results_dir.iterdir()):
        if entry.name == _OLD_BENCH_DIR and entry.is_dir():
            skipped.append(Skipped(entry, _OLD_BENCH_REASON))
        elif entry.name not in _OWN_TOP_LEVEL:
            skipped.append(Skipped(entry, "not part of the results store"))
    runs_dir = results_dir / RUNS_DIR
    if not runs_dir.is_dir():
        return runs, skipped
    for entry in sorted(runs_dir.iterdir()):
        if entry.name.startswith(TMP_PREFIX):
            skipped.append(Skipped(entry, "unfinished write of a run (interrupted)"))
        elif not entry.is_dir():
            skipped.append(Skipped(entry, "not a run directory"))
        else:
            try:
                runs.append(_read_run(entry))
            except ValueError as err:
                skipped.append(Skipped(entry, str(err)))
    return runs, skipped


def total_cost_usd(runs: list[StoredRun]) -> float:
    """Dollars spent by the stored runs (device-seconds x price per hour)."""
    return float(sum(float(run.meta.get("cost_usd") or 0.0) for run in runs))
