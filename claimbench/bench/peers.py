"""Peer results: our engine beside another serving engine (vLLM) on the same workload.

benchmarks/engine_vs_vllm.py measures both sides in one process run; ``--store DIR`` keeps
the result as ``DIR/peers/<UTC time>-<peer>-<n>.json`` with its provenance (hardware, commit,
versions, settings). The store is append-only, as runs are: a file is written once, under a
new name, through a temporary file renamed into place. A night whose peer could not be
set up or measured stores a record saying so (``status: not-measured`` and the reason), so
the gap is visible. The scoreboard's headline row is the newest measured record per
hardware class (``headline``).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PEERS_SUBDIR = "peers"
MEASURED = "measured"
NOT_MEASURED = "not-measured"


def peer_record(
    peer: str,
    *,
    status: str,
    hardware: dict[str, Any],
    git: dict[str, Any],
    result: dict[str, Any] | None = None,
    reason: str | None = None,
    when: datetime | None = None,
) -> dict[str, Any]:
    """One stored comparison: ``result`` is engine_vs_vllm's (ours, vllm, ratio, settings);
    a not-measured record carries ``reason`` instead."""
    if status not in (MEASURED, NOT_MEASURED):
        raise ValueError(f"status must be {MEASURED} or {NOT_MEASURED}, got {status!r}")
    if status == MEASURED and result is None:
        raise ValueError("a measured peer record needs the benchmark's result")
    if status == NOT_MEASURED and not reason:
        raise ValueError("a not-measured peer record needs the reason")
    return {
        "peer": peer,
        "status": status,
        "time": (when or datetime.now(UTC)).isoformat(),
        "hardware": hardware,
        "git": git,
        "result": result,
        "reason": reason,
    }


def store_peer(results_dir: Path, record: dict[str, Any]) -> Path:
    """Write ``record`` as a new file under ``results_dir/peers``; never overwrite one."""
    folder = results_dir / PEERS_SUBDIR
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.fromisoformat(record["time"]).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    # A counter, so records of one second sort in the order they were written. The whole record
    # is written to a temporary file first and then linked to its name, which fails if the
    # name is taken: two writers of the same second (two runners) each get their own name.
    text = json.dumps(record, indent=2, sort_keys=True, default=str)
    fd, tmp = tempfile.mkstemp(prefix=".peer-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        for n in range(100):
            path = folder / f"{stamp}-{record['peer']}-{n:02d}.json"
            try:
                os.link(tmp, path)
            except FileExistsError:
                continue
            return path
        raise FileExistsError(f"100 peer records named {stamp}-{record['peer']} already")
    finally:
        os.unlink(tmp)


def read_peers(results_dir: Path) -> list[dict[str, Any]]:
    """Every readable peer record, oldest first; unreadable files are left out."""
    records = []
    for path in sorted((results_dir / PEERS_SUBDIR).glob("*.json")):
        try:
            record = json.loads(path.read_text())
            datetime.fromisoformat(record["time"])
            if record["status"] == MEASURED:
                _row(record)  # every number the headline shows is there
            elif record["status"] != NOT_MEASURED:
                continue
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        records.append(record)
    return sorted(records, key=lambda r: datetime.fromisoformat(r["time"]))


@dataclass(frozen=True)
class HeadlineRow:
    """The newest measured comparison on one hardware class."""

    peer: str
    evidence: str  # tpu | gpu | cpu: CPU numbers are labelled as such on the page
    hardware: str  # e.g. "TPU v6e x1", "CPU (Intel Xeon, 2 cores)"
    time: str
    ours_tok_s: float
    peer_tok_s: float
    ratio: float  # ours / peer output tokens per second
    model: str
    peer_version: str
    commit: str | None
    # CPU only: the cores the peer's model threads had ("" where not a CPU result).
    peer_cores: str = ""


def headline(records: list[dict[str, Any]]) -> list[HeadlineRow]:
    """Per (peer, hardware class), the newest measured record's row; accelerators first."""
    newest: dict[tuple[str, str], dict[str, Any]] = {}
    for record in records:
        if record["status"] == MEASURED:
            newest[(record["peer"], record["hardware"].get("platform", "cpu"))] = record
    order = {"tpu": 0, "gpu": 1, "cpu": 2}
    rows = [_row(r) for r in newest.values()]
    return sorted(rows, key=lambda row: (order.get(row.evidence, 3), row.peer))


def _row(record: dict[str, Any]) -> HeadlineRow:
    hw, result = record["hardware"], record["result"]
    return HeadlineRow(
        peer=record["peer"],
        evidence=hw.get("platform", "cpu"),
        hardware=record_hardware(record),
        time=record["time"],
        ours_tok_s=_tok_s(result["ours"]),
        peer_tok_s=_tok_s(result["vllm"]),
        ratio=float(result["ratio"]),
        model=str(result.get("model", "")),
        peer_version=str(result.get("vllm_version", "")),
        commit=(record.get("git") or {}).get("sha"),
        peer_cores=peer_cores(result) if hw.get("platform", "cpu") == "cpu" else "",
    )


def peer_cores(result: dict[str, Any]) -> str:
    """Where vLLM-CPU's model threads ran: the cores ours computed on (--vllm-cores all), or
    vLLM's own binding, one core kept back for its scheduler (asked for, or a record from
    before the benchmark set them)."""
    cores = result.get("vllm_cores") or {}
    if cores.get("cores"):
        return f"vLLM on cores {cores['cores']}, as ours"
    return "vLLM's own binding: one core kept back for its scheduler"


def _tok_s(side: dict[str, Any]) -> float:
    """A side's tokens/s as its ratio is taken: the median of the rounds (records since the
    ratio became one of medians), else the mean older records carry."""
    return float(side.get("median_tok_s", side["mean_tok_s"]))


def hardware_label(hw: dict[str, Any], host: dict[str, Any] | None = None) -> str:
    """ "TPU v6e x1" / "GPU NVIDIA H200 x1" / "CPU (model, N cores)" from detect_hardware().

    A CPU's class needs more than its model name, which a virtual machine often reduces to
    "AMD EPYC" for a Zen 3, a Zen 4 and a Zen 5 alike: with ``host`` (the benchmark's record of
    the host, ``result["host"]``) the label adds the CPU family and model number where the
    record has them and the vector ISA the native kernels were built for ("CPU (AMD EPYC
    family 25 model 1, avx2, 2 cores)"), so that one class's numbers are never set against
    another's. Records from before the benchmark stored these keep the shorter label."""
    platform = hw.get("platform", "cpu")
    if platform == "cpu":
        name = hw.get("cpu_model") or "unknown"
        host = host or {}
        if host.get("cpu_family") is not None and host.get("cpu_model_number") is not None:
            name += f" family {host['cpu_family']} model {host['cpu_model_number']}"
        isa = f"{host['vector_isa']}, " if host.get("vector_isa") else ""
        return f"CPU ({name}, {isa}{hw.get('host_cpu_count', '?')} cores)"
    name = hw.get("chip") or hw.get("device_kind") or platform
    return f"{platform.upper()} {name} x{hw.get('num_chips') or hw.get('device_count') or 1}"


def cpu_family_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, int]:
    """{"cpu_family", "cpu_model_number"} from /proc/cpuinfo's first "cpu family" and "model"
    lines, for a peer record's host (hardware_label); {} where they cannot be read."""
    found: dict[str, int] = {}
    keys = {"cpu family": "cpu_family", "model": "cpu_model_number"}
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        key, _, value = line.partition(":")
        name = keys.get(key.strip())
        if name and name not in found and value.strip().isdigit():
            found[name] = int(value.strip())
    return found if len(found) == 2 else {}


def record_hardware(record: dict[str, Any]) -> str:
    """A peer record's hardware class (hardware_label with the record's host, where kept)."""
    host = (record.get("result") or {}).get("host")
    return hardware_label(record["hardware"], host if isinstance(host, dict) else None)


def latest_attempt(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest record, measured or not (a failed night shows beside the headline)."""
    return records[-1] if records else None
