"""Request traces: CSV or Parquet files of recorded arrivals to replay.

A trace has one row per request with columns ``timestamp`` (seconds, relative or
absolute), ``tenant``, ``prompt_len`` and ``output_len``; other columns are ignored.
Any problem with the file is one ValueError line naming the file and the problem.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

TRACE_COLUMNS = ("timestamp", "tenant", "prompt_len", "output_len")
_READERS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


def load_trace(path: str | Path) -> pd.DataFrame:
    """The trace at ``path`` sorted by time, timestamps shifted so the first is 0.

    Returns columns timestamp f64 (seconds), tenant str, prompt_len i64 (>= 1),
    output_len i64 (>= 1), index 0..n-1. Rows with equal timestamps keep file order.
    """
    path = Path(path)
    frame = _read(path)
    missing = [c for c in TRACE_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(
            f"trace {path}: missing column(s) {missing}; found {[str(c) for c in frame.columns]}"
        )
    if len(frame) == 0:
        raise ValueError(f"trace {path}: has no rows")
    if frame["tenant"].isna().any():
        row = int(np.flatnonzero(frame["tenant"].isna().to_numpy())[0])
        raise ValueError(f"trace {path}: column 'tenant' has a missing value at data row {row + 1}")
    timestamp = _numeric(path, frame, "timestamp")
    prompt_len = _whole(path, frame, "prompt_len")
    output_len = _whole(path, frame, "output_len")
    if (timestamp < 0).any():
        row = int(np.flatnonzero(timestamp < 0)[0])
        raise ValueError(
            f"trace {path}: column 'timestamp' has negative value {timestamp[row]} "
            f"at data row {row + 1}"
        )
    trace = pd.DataFrame(
        {
            "timestamp": timestamp - timestamp.min(),
            "tenant": frame["tenant"].astype(str).to_numpy(),
            "prompt_len": prompt_len,
            "output_len": output_len,
        }
    )
    return trace.sort_values("timestamp", kind="stable", ignore_index=True)


def tenant_rows(trace: pd.DataFrame, tenant: str, path: str | Path) -> pd.DataFrame:
    """The rows of ``trace`` (from ``load_trace``) for ``tenant``; ValueError if it has none."""
    rows = trace[trace["tenant"] == tenant]
    if len(rows) == 0:
        found = sorted(trace["tenant"].unique())
        raise ValueError(f"trace {path}: no rows for tenant {tenant!r}; tenants: {found}")
    return rows


def trace_rate(rows: pd.DataFrame, path: str | Path) -> float:
    """Recorded arrival rate of ``rows`` in requests/s: one over the mean inter-arrival gap."""
    span_s = float(rows["timestamp"].iloc[-1] - rows["timestamp"].iloc[0])
    if len(rows) < 2 or span_s <= 0:
        raise ValueError(
            f"trace {path}: {len(rows)} arrival(s) over {span_s} s define no rate for tenant "
            f"{rows['tenant'].iloc[0]!r}"
        )
    return (len(rows) - 1) / span_s


def _read(path: Path) -> pd.DataFrame:
    fmt = _READERS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"trace {path}: unknown format; expected one of {sorted(_READERS)}")
    if not path.is_file():
        raise ValueError(f"trace {path}: no such file")
    try:
        if fmt == "csv":
            # Read tenant as text so ids like "007" survive.
            return pd.read_csv(path, dtype={"tenant": str})
        return pd.read_parquet(path)
    except Exception as err:  # pandas and pyarrow raise many types for a malformed file
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"trace {path}: cannot read as {fmt}: {reason}") from err


def _numeric(path: Path, frame: pd.DataFrame, column: str) -> np.ndarray:
    """f64[n] values of ``column``; ValueError at the first missing, non-numeric or infinite one."""
    raw = frame[column]
    if pd.api.types.is_bool_dtype(raw) or not (
        pd.api.types.is_numeric_dtype(raw)
        or pd.api.types.is_object_dtype(raw)
        or pd.api.types.is_string_dtype(raw)
    ):
        raise ValueError(f"trace {path}: column {column!r} has non-numeric type {raw.dtype}")
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        original = raw.iloc[row]
        shown = repr(original) if isinstance(original, str) else str(original)
        problem = "a missing value" if pd.isna(original) else f"non-numeric value {shown}"
        if not pd.isna(original) and np.isinf(values[row]):
            problem = f"non-finite value {shown}"
        raise ValueError(f"trace {path}: column {column!r} has {problem} at data row {row + 1}")
    return values


def _whole(path: Path, frame: pd.DataFrame, column: str) -> np.ndarray:
    """i64[n] token counts of ``column``; ValueError at the first fractional or < 1 one."""
    values = _numeric(path, frame, column)
    bad = (values != np.floor(values)) | (values < 1)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"trace {path}: column {column!r} must hold whole token counts >= 1, "
            f"got {values[row]:g} at data row {row + 1}"
        )
    return values.astype(np.int64)
