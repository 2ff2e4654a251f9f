"""scripts/run_committed.sh: claims run from the committed source while the checkout has edits,
stored in the checkout's results, tied to the commit and scored."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from claimbench.harness import run_checks, scoring
from claimbench.harness.claims import load_claims
from claimbench.harness.results import read_runs

REPO = Path(__file__).resolve().parents[2]


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)
    return done.stdout.decode().strip()


@pytest.fixture
def checkout(project: Path) -> Path:
    """The fake claims project as a git checkout holding the two scripts, committed."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    (project / "scripts").mkdir()
    for name in ("export_source.sh", "run_committed.sh"):
        shutil.copy2(REPO / "scripts" / name, project / "scripts" / name)
    git(project, "init", "-q")
    git(project, "add", ".")
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    return project


@pytest.mark.slow  # a claimbench process: about half a minute on a busy host
def test_runs_from_the_commit_not_the_edited_tree(checkout, tmp_path):
    fake = checkout / "experiments" / "fake.py"
    committed = fake.read_text()
    # An edit in progress: this version would record a score of 0.5, and makes the tree dirty.
    fake.write_text(committed.replace('base = ctx.params["base"]', "base = 0.5"))
    results = tmp_path / "store"
    env = os.environ | {"PYTHON": sys.executable, "RESULTS_DIR": str(results)}
    script = checkout / "scripts" / "run_committed.sh"
    done = subprocess.run(
        [str(script), "run", "--claim", "fake-pass"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    (run,) = read_runs(results)[0]
    assert run.meta["git"] == {
        "sha": git(checkout, "rev-parse", "HEAD"),
        "dirty": None,
        "exported": True,
    }
    scores = run.measurements[run.measurements["metric"] == "score"]["value"].tolist()
    assert scores == pytest.approx([2.0, 2.01, 2.02])  # the committed experiment's values
    # Once the edit is committed or undone, today's design is the run's and the run is scored.
    fake.write_text(committed)
    claims = load_claims(checkout)
    designs = run_checks.today_designs(checkout, claims)
    (score,) = [
        s for s in scoring.score_claims(claims, [run], designs) if s.claim.id == "fake-pass"
    ]
    assert (score.verdict, score.num_earlier) == ("confirmed", 0)
    bad = subprocess.run([str(script), "score"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "usage: scripts/run_committed.sh run" in bad.stderr
    assert json.loads((run.path / "meta.json").read_text())["design_hash"] == designs["fake-pass"]
