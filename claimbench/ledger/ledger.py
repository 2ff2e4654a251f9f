"""The $100 ledger: one row per run, append-only, in files that are written once.

A row says what a run cost and what it served: hardware class, chip type and count, device
seconds, the price per chip-hour with its source and date, dollars, and the tokens it served
(from the run's per-request records). Each append writes its rows to a new file,
``results/ledger/<UTC time>-<first run id>-<random>.parquet``, through a temporary file
renamed into place (platform/files.replace_file), and never touches a file written before.
So two runners that append on their own machines and push to one results branch add
different files: git merges them without a conflict, and no row is lost, where two copies of
one Parquet file could only overwrite each other. The ledger is every such file, plus
``results/ledger.parquet`` where a store kept its rows in one file before (read, never
rewritten); a run id in several files is paid once, by the first file in name order (the
single file first). A file that cannot be read is reported, never rewritten.
"""

from __future__ import annotations

import fcntl
import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from claimbench.harness.project_config import DeclaredPrice
from claimbench.harness.results import read_runs
from claimbench.ledger.prices import MachinePrice, UnpricedError, machine_price, unpriced
from claimbench.platform.files import replace_file

LEDGER_FILE = "ledger.parquet"  # the single file stores kept before the ledger directory
LEDGER_DIR = "ledger"
LOCK_FILE = ".ledger.lock"
SOURCES = ("run", "backfill")  # appended by `run` / added later from a stored run's meta.json
COLUMNS = {
    "run_id": "string",
    "claim_id": "string",
    "profile": "string",
    "trials": "int64",
    "start": "string",  # ISO 8601, UTC
    "hardware_class": "string",  # cpu | gpu | tpu
    "chip": "string",  # spec-table key (v6e), else the device kind
    "num_chips": "int64",
    "device_s": "float64",  # seconds the machine was held by the run (a CPU's too)
    "usd_per_chip_hour": "float64",
    "price_source": "string",
    "price_as_of": "string",  # ISO date; "" where the price has no date (CPU, environment)
    "usd": "float64",  # NaN: run on an accelerator nobody priced
    "prompt_tokens": "int64",  # prompt tokens of requests the engine scheduled
    "output_tokens": "int64",  # tokens generated
    "source": "string",  # one of SOURCES
    "recorded_at": "string",  # ISO 8601, UTC
}


class LedgerError(ValueError):
    """A ledger file that cannot be read or a row that cannot be appended; one line."""


def ledger_path(results_dir: Path) -> Path:
    """The single-file ledger of earlier stores (read, never written)."""
    return results_dir / LEDGER_FILE


def ledger_dir(results_dir: Path) -> Path:
    """Where appends write their row files."""
    return results_dir / LEDGER_DIR


def ledger_files(results_dir: Path) -> list[Path]:
    """Every file of the ledger, in the order its rows count: the single file, then the row
    files by name."""
    files = [ledger_path(results_dir)] if ledger_path(results_dir).exists() else []
    folder = ledger_dir(results_dir)
    if folder.is_dir():
        files += sorted(p for p in folder.glob("*.parquet") if not p.name.startswith("."))
    return files


def _empty() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype=kind) for name, kind in COLUMNS.items()})


def read_ledger(results_dir: Path) -> pd.DataFrame:
    """Every row of the ledger, each run once (an empty frame with COLUMNS when there is none
    yet); LedgerError naming the first file that cannot be read."""
    frames = [_read_file(path) for path in ledger_files(results_dir)]
    if not frames:
        return _empty()
    table = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return table.drop_duplicates("run_id", keep="first").reset_index(drop=True).astype(COLUMNS)


def _read_file(path: Path) -> pd.DataFrame:
    """One ledger file's rows as COLUMNS; LedgerError when it is not a ledger file."""
    try:
        frame = pd.read_parquet(path)
    except Exception as err:  # pyarrow raises several types for a corrupt file
        raise LedgerError(
            f"{path} is not a readable ledger ({type(err).__name__}); it is left as it is: "
            "restore it from the results branch or move it aside"
        ) from None
    missing = [name for name in COLUMNS if name not in frame.columns]
    if missing:
        raise LedgerError(f"{path} lacks ledger columns {missing}; it is left as it is")
    try:
        return frame.astype(COLUMNS)
    except (TypeError, ValueError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise LedgerError(
            f"{path} has a column of the wrong type ({reason}); it is left as it is"
        ) from None


def tokens_served(requests: pd.DataFrame) -> tuple[int, int]:
    """(prompt tokens, generated tokens) of a run's per-request records.

    A prompt counts once the engine scheduled it (a request rejected at ingress served nothing);
    generated tokens count whether or not their request finished.
    """
    if requests.empty or "output_tokens" not in requests.columns:
        return 0, 0
    served = requests
    if "first_scheduled_s" in requests.columns:
        served = requests[requests["first_scheduled_s"].notna()]
    prompt = int(served["prompt_tokens"].sum()) if "prompt_tokens" in served.columns else 0
    return prompt, int(requests["output_tokens"].sum())


def run_device_s(meta: dict[str, Any]) -> float:
    """Seconds a run held its machine: its wall time, also on a CPU (whose meta.json prices
    nothing and so stores device_s 0); end minus start for runs stored without wall_s."""
    if meta.get("wall_s") is not None:
        return float(meta["wall_s"])
    start = datetime.fromisoformat(meta["start"])
    return (datetime.fromisoformat(meta["end"]) - start).total_seconds()


def row_for_run(run_dir: Path, price: MachinePrice, *, source: str = "run") -> dict[str, Any]:
    """The ledger row of the stored run in ``run_dir`` at ``price``."""
    if source not in SOURCES:
        raise ValueError(f"source {source!r} is not one of {SOURCES}")
    meta = json.loads((run_dir / "meta.json").read_text())
    hardware = meta["hardware"]
    prompt, output = tokens_served(pd.read_parquet(run_dir / "requests.parquet"))
    device_s = run_device_s(meta)
    return {
        "run_id": meta["run_id"],
        "claim_id": meta["claim"],
        "profile": meta["profile"],
        "trials": int(meta["trials"]),
        "start": str(meta["start"]),
        "hardware_class": hardware["platform"],
        "chip": hardware.get("chip") or hardware.get("device_kind") or hardware["platform"],
        "num_chips": price.num_chips,
        "device_s": device_s,
        "usd_per_chip_hour": price.usd_per_chip_hour,
        "price_source": price.source,
        "price_as_of": price.as_of,
        "usd": price.cost_usd(device_s),
        "prompt_tokens": prompt,
        "output_tokens": output,
        "source": source,
        "recorded_at": datetime.now(UTC).isoformat(),
    }


@contextmanager
def _locked(results_dir: Path) -> Iterator[None]:
    results_dir.mkdir(parents=True, exist_ok=True)
    with open(results_dir / LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def append_rows(results_dir: Path, rows: list[dict[str, Any]]) -> int:
    """Append ``rows`` (dicts with COLUMNS) to the ledger atomically; return how many landed.

    A row whose run id is already in the ledger is not appended again (each run is paid once).
    Raises LedgerError when the existing ledger cannot be read; it is then left untouched.
    """
    if not rows:
        return 0
    for row in rows:
        missing = [name for name in COLUMNS if name not in row]
        if missing:
            raise ValueError(f"ledger row for {row.get('run_id')!r} lacks {missing}")
    with _locked(results_dir):
        old = read_ledger(results_dir)
        seen = set(old["run_id"])
        new = [row for row in rows if row["run_id"] not in seen]
        new = list({row["run_id"]: row for row in new}.values())
        if not new:
            return 0
        added = pd.DataFrame(new, columns=list(COLUMNS)).astype(COLUMNS)
        folder = ledger_dir(results_dir)
        folder.mkdir(exist_ok=True)
        # Named by the time of the append, so name order is append order (rows read back in
        # the order they were written); the random tail keeps two runners' files apart even
        # for one run id (a backfill of the same stored run on two machines).
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        path = folder / f"{stamp}-{new[0]['run_id']}-{secrets.token_hex(4)}.parquet"
        replace_file(path, lambda tmp: added.to_parquet(tmp, index=False))
    return len(new)


def backfill_price(meta: dict[str, Any], declared: dict[str, DeclaredPrice]) -> MachinePrice:
    """The price of a run stored before the ledger: what its meta.json priced it at when that
    was a price (an accelerator run), else today's price for its hardware, else unpriced (NaN
    dollars: the run happened, at a cost nobody recorded)."""
    hardware = meta["hardware"]
    num_chips = int(hardware.get("num_chips") or 1)
    per_hour = float(meta.get("price_per_hour") or 0.0)
    if hardware["platform"] != "cpu" and per_hour > 0:
        day = str(meta["start"])[:10]
        return MachinePrice(per_hour / num_chips, num_chips, "meta.json price_per_hour", day)
    try:
        return machine_price(hardware, declared)
    except UnpricedError:
        return unpriced(hardware)


def missing_runs(results_dir: Path, ledger: pd.DataFrame) -> list[Path]:
    """Stored run directories whose run id the ledger lacks (oldest first)."""
    runs, _ = read_runs(results_dir)
    seen = set(ledger["run_id"])
    return [run.path for run in runs if run.run_id not in seen]


def backfill(results_dir: Path, declared: dict[str, DeclaredPrice]) -> int:
    """Add every stored run the ledger lacks, as source "backfill"; return how many were added."""
    rows = []
    for run_dir in missing_runs(results_dir, read_ledger(results_dir)):
        meta = json.loads((run_dir / "meta.json").read_text())
        rows.append(row_for_run(run_dir, backfill_price(meta, declared), source="backfill"))
    return append_rows(results_dir, rows)
