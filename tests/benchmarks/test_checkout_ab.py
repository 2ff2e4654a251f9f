"""benchmarks/checkout_ab.py: two commits' engines, process against process, at a tiny size."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "checkout_ab.py"
TINY = "--requests 2 --output-len 4 --min-input 8 --max-input 16 --max-num-seqs 2"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True
    )


@pytest.mark.slow
def test_a_commit_against_itself_alternates_processes_and_gives_the_same_tokens():
    proc = run("HEAD", "--new", "HEAD", "--pairs", "1", "--rounds", "2", *TINY.split(), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    labels = [p["label"] for p in result["processes"]]
    assert labels == ["old", "new"]
    # The same code in two processes: greedy tokens identical, ratios of the same medians.
    assert result["tokens_identical"]
    ratio = result["new_over_old"]["tok_s"]
    expected = result["processes"][1]["tok_s"] / result["processes"][0]["tok_s"]
    assert ratio == pytest.approx(expected)
    assert all(0 <= p["idle"] <= 1 for p in result["processes"])
    # The temporary worktrees are gone.
    trees = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True
    ).stdout
    assert "old" not in {Path(line.split()[0]).name for line in trees.splitlines()}


def test_an_unknown_commit_is_one_line_and_a_non_zero_exit():
    proc = run("no-such-commit-anywhere", *TINY.split())
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("checkout_ab: ")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_a_missing_commit_argument_is_refused():
    proc = run("--pairs", "1")
    assert proc.returncode == 2
    assert "OLD_REV" in proc.stderr
