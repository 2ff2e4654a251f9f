"""scripts/accelerator_evidence.sh: runs each claim in its own time box, stores the runs, goes on
after a failure and reports it, and refuses a CPU-only host unless told."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "accelerator_evidence.sh"


def _run(results: Path, *specs: str, allow_cpu: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "CLAIM_TIMEOUT_S": "300"}
    env.pop("JAX_PLATFORMS", None)
    if allow_cpu:
        env["ALLOW_CPU"] = "1"
    return subprocess.run(
        ["bash", str(SCRIPT), str(results), *specs],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )


@pytest.mark.slow
def test_stores_runs_and_reports_a_failed_claim(tmp_path):
    # kv-dominates: the quickest claim to run (what is checked is the script's loop, not the claim).
    spec = "kv-dominates:quick:3:300"
    done = _run(tmp_path / "res", "no-such-claim:quick", spec, allow_cpu=True)
    assert done.returncode == 1, done.stderr
    assert "failed or timed out: no-such-claim" in done.stdout
    (run,) = (tmp_path / "res" / "runs").iterdir()  # the claim after the failure still ran
    meta = json.loads((run / "meta.json").read_text())
    assert meta["claim"] == "kv-dominates" and meta["trials"] == 3


@pytest.mark.slow
def test_refuses_a_cpu_only_host(tmp_path):
    done = _run(tmp_path / "res", "kv-int8:quick", allow_cpu=False)
    assert done.returncode == 2
    assert "no accelerator" in done.stderr
    assert not (tmp_path / "res").exists()
