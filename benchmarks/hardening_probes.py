"""The hardening probe's findings measured on one checkout, one table row per finding.

Run it once per checkout (a git worktree) to put a commit before the hardening fixes beside
one after them; ``--root`` names the checkout and goes first on ``sys.path`` (and on
``PYTHONPATH`` for the CLI it starts), so each run measures that checkout's code:

    PYTHONPATH=/tmp/probe_after python benchmarks/hardening_probes.py --root /tmp/probe_after

Findings (the numbers are the issue's):
 1. audit: five rewrites of the log by someone who can write its directory but cannot read
    the audit key (where the log has one); does verification catch each?
 2. 12 parallel ``tenants add`` / ``agents add``: entries left in the file vs keys printed.
 6. the engine boundary: a numpy int16 ``max_tokens`` and a NaN ``arrival_time`` given to
    ``add_request``: refused, or accepted and then every ``step()`` raises?
 8. the MCP guard's ``pattern`` check on ``"kv-int8\\n"``.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ATTACKER_KEY = b"a key the attacker made up"  # the real audit key is not readable to them
PARALLEL = 12


def _row(finding: str, result: str) -> None:
    print(f"| {finding} | {result} |", flush=True)


# --- 1. audit -------------------------------------------------------------------------


class _Audit:
    """The checkout's audit API: before (plain sha256, head beside the log) or after (keyed)."""

    def __init__(self, work: Path) -> None:
        from claimbench.ops import audit

        self.audit = audit
        self.keyed = not hasattr(audit, "entry_sha")
        self.key = b"k" * 32
        self.work = work

    def new_log(self, name: str, lines: int, old_head_at: int = 0) -> Path:
        """A log of ``lines`` calls; with ``old_head_at``, its head as it was after that many
        lines is kept beside it (``.old``), as an attacker's earlier copy."""
        log = self.work / name / "mcp.jsonl"
        writer = self.audit.AuditLog(log, self.key) if self.keyed else self.audit.AuditLog(log)
        for i in range(lines):
            writer.append({"tool": "list_claims", "arguments": {"i": i}, "outcome": "ok"})
            if i + 1 == old_head_at:
                _head(log).with_suffix(".old").write_bytes(_head(log).read_bytes())
        return log

    def verify(self, log: Path, checkpoint: Path | None = None) -> str:
        if self.keyed:
            from claimbench.ops.audit_verify import verify

            verdict = verify(log, self.key, checkpoint)
            return "intact" if verdict.ok else f"caught ({verdict.problem})"
        verdict = self.audit.verify(log)
        return (
            f"intact over {verdict.num_lines} line(s)"
            if verdict.ok
            else f"caught (line {verdict.broken_line}: {verdict.reason})"
        )

    def checkpoint(self, log: Path) -> Path | None:
        """A checkpoint of the untampered log, kept outside its directory (after only)."""
        if not self.keyed:
            return None
        from claimbench.ops.audit_verify import record_checkpoint

        path = self.work / f"{log.parent.name}.checkpoint"
        record_checkpoint(log, self.key, path)
        return path

    def rehash(self, entry: dict) -> dict:
        """The attacker's recomputed hash: the real sha256 before; after, a MAC under a key
        of their own (they cannot read the real one)."""
        if not self.keyed:
            return {**entry, "sha": self.audit.entry_sha(entry)}
        body = {k: v for k, v in entry.items() if k != "mac"}
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return {**entry, "mac": hmac.new(ATTACKER_KEY, text.encode(), hashlib.sha256).hexdigest()}

    def link(self, entry: dict, prev: dict) -> dict:
        field = "mac" if self.keyed else "sha"
        entry = {**entry, "prev": prev[field]}
        if self.keyed and "seq" in prev:
            entry["seq"] = prev["seq"] + 1
        return self.rehash(entry)

    def head_for(self, lines: list[dict]) -> str:
        """A head the attacker writes for ``lines``: computed before; after, the MAC is theirs."""
        if not self.keyed:
            size = sum(len(json.dumps(e, separators=(",", ":"))) + 1 for e in lines)
            sha = lines[-1]["sha"] if lines else self.audit.GENESIS
            return json.dumps({"num_lines": len(lines), "sha": sha, "size_bytes": size})
        last = lines[-1]
        head = {"log": last["log"], "num_lines": last["seq"], "last_mac": last["mac"]}
        text = json.dumps(head, sort_keys=True, separators=(",", ":"))
        head["mac"] = hmac.new(ATTACKER_KEY, text.encode(), hashlib.sha256).hexdigest()
        return json.dumps(head, sort_keys=True, separators=(",", ":")) + "\n"


def _entries(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_bytes().splitlines() if line]


def _write(log: Path, entries: list[dict]) -> None:
    log.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries))


def _head(log: Path) -> Path:
    return log.with_name(log.name + ".head")


def probe_audit(work: Path) -> None:
    a = _Audit(work)

    def tampered(name: str, tamper) -> None:
        log = a.new_log(name, 10, old_head_at=7)
        checkpoint = a.checkpoint(log)
        tamper(log)
        result = a.verify(log)
        if checkpoint is not None:
            with_checkpoint = a.verify(log, checkpoint)
            same = with_checkpoint == result
            result += "; the same with a checkpoint" if same else f"; with one: {with_checkpoint}"
        _row(f"audit: {name}", result)

    def append(log: Path) -> None:
        lines = _entries(log)
        forged = {k: v for k, v in lines[-1].items()}
        forged["arguments"] = {"i": "forged"}
        lines.append(a.link(forged, lines[-1]))
        _write(log, lines)

    def edit(log: Path) -> None:
        lines = _entries(log)
        lines[4] = a.rehash({**lines[4], "outcome": "refused"})
        for i in range(5, len(lines)):
            lines[i] = a.link(lines[i], lines[i - 1])
        _write(log, lines)
        _head(log).write_text(a.head_for(lines))

    def cut3(log: Path) -> None:
        lines = _entries(log)[:-3]
        _write(log, lines)
        _head(log).write_text(a.head_for(lines))

    def zero_head(log: Path) -> None:
        head = json.loads(_head(log).read_text())
        head["num_lines"] = 0
        _head(log).write_text(json.dumps(head))
        _write(log, _entries(log)[:-5])

    def rolled_back(log: Path) -> None:
        _write(log, _entries(log)[:-3])
        _head(log).write_bytes(_head(log).with_suffix(".old").read_bytes())

    def emptied(log: Path) -> None:
        log.write_text("")
        _head(log).unlink()

    tampered("append, hash recomputed", append)
    tampered("edit + chain rehashed + head rewritten", edit)
    tampered("last 3 lines deleted + head rewritten", cut3)
    tampered("head num_lines 0 + 5 lines deleted", zero_head)
    tampered("emptied log + head deleted", emptied)
    tampered("last 3 lines deleted + the head copied when the log had 7 (rollback)", rolled_back)


# --- 2. parallel adds -----------------------------------------------------------------


def _count_entries(path: Path, section: str) -> int:
    import yaml

    data = yaml.safe_load(path.read_text()) if path.exists() else None
    if isinstance(data, dict) and isinstance(data.get(section), dict | list):
        return len(data[section])
    return len(data) if isinstance(data, dict | list) else 0


def probe_adds(root: Path, work: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(root)}
    for command in ("tenants", "agents"):
        path = work / f"{command}.yaml"
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "claimbench", command, "add", f"n{i}", "--file", str(path)],
                cwd=work,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(PARALLEL)
        ]
        outs = [(p.communicate()[0], p.returncode) for p in procs]
        printed = sum(1 for out, rc in outs if rc == 0 and out.strip())
        failed = sum(1 for _, rc in outs if rc != 0)
        _row(
            f"{PARALLEL} parallel `{command} add`",
            f"{printed} keys printed, {failed} exited non-zero, "
            f"{_count_entries(path, command)} entries in the file",
        )


# --- 6. engine boundary ---------------------------------------------------------------


def probe_engine(root: Path) -> None:
    import numpy as np

    sys.path.insert(1, str(root / "tests"))
    import engine_helpers

    sampling = engine_helpers.SamplingParams
    cases = {
        "max_tokens = numpy int16 32767": (lambda: sampling(max_tokens=np.int16(32767)), {}),
        "arrival_time = NaN": (lambda: sampling(max_tokens=4), {"arrival_time": float("nan")}),
    }
    for name, (params, kwargs) in cases.items():
        engine = engine_helpers.tiny_engine()
        try:
            engine.add_request([5, 6, 7], params(), **kwargs)
        except (ValueError, TypeError) as e:
            _row(f"engine add_request: {name}", f"refused ({type(e).__name__}: {e})"[:200])
            continue
        engine.add_request([5, 6, 7, 8], sampling(max_tokens=4))
        try:
            for _ in range(8):
                engine.step()
            outcome = "accepted; 8 steps ran"
        except Exception as e:  # noqa: BLE001 - the finding is that any step raises
            outcome = f"accepted; then step() raises {type(e).__name__}: {e}"
        _row(f"engine add_request: {name}", outcome[:200])


# --- 8. MCP guard pattern -------------------------------------------------------------


def probe_guard() -> None:
    import jsonschema

    from claimbench.ops import guard

    validator = getattr(guard, "_Validator", jsonschema.Draft202012Validator)
    schema = {"type": "string", "pattern": r"^[a-z0-9][a-z0-9-]*$"}  # runbook's ClaimId
    errors = list(validator(schema).iter_errors("kv-int8\n"))
    _row('MCP guard: claim_id "kv-int8\\n"', "refused" if errors else "passes the pattern")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="the checkout to measure")
    parser.add_argument("--probe", action="append", choices=("audit", "adds", "engine", "guard"))
    args = parser.parse_args()
    root = args.root.resolve()
    sys.path.insert(0, str(root))
    import claimbench

    print(f"checkout {root}: claimbench from {Path(claimbench.__file__).parent}", flush=True)
    print("| finding | result |\n| --- | --- |", flush=True)
    chosen = args.probe or ["audit", "guard", "adds", "engine"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "audit" in chosen:
            probe_audit(work)
        if "guard" in chosen:
            probe_guard()
        if "adds" in chosen:
            probe_adds(root, work)
        if "engine" in chosen:
            probe_engine(root)


if __name__ == "__main__":
    main()
