"""benchmarks/checkout_ab.py: two commits' engines, process against process, at a tiny size."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = "--requests 2 --output-len 4 --min-input 8 --max-input 16 --max-num-seqs 2"


def run(*args: str, root: Path = ROOT) -> subprocess.CompletedProcess:
    script = root / "benchmarks" / "checkout_ab.py"
    return subprocess.run(
        [sys.executable, str(script), *args], cwd=root, capture_output=True, text=True
    )


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)
    return done.stdout.decode().strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The engine and the benchmarks, committed in a repository of their own (so the test
    needs no history of this checkout, and adds no worktree to it)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    files = git(ROOT, "ls-files", "claimbench", "benchmarks").splitlines()
    if not files:
        pytest.skip("this checkout is not a git work tree")
    root = tmp_path / "repo"
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, root / name)
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "engine")
    return root


@pytest.mark.slow
def test_a_commit_against_itself_alternates_processes_and_gives_the_same_tokens(repo):
    args = ["HEAD", "--new", "HEAD", "--pairs", "1", "--rounds", "2", *TINY.split(), "--json"]
    proc = run(*args, root=repo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    labels = [p["label"] for p in result["processes"]]
    assert labels == ["old", "new"]
    # The same code in two processes: greedy tokens identical, ratios of the same medians.
    assert result["tokens_identical"]
    ratio = result["new_over_old"]["tok_s"]
    expected = result["processes"][1]["tok_s"] / result["processes"][0]["tok_s"]
    assert ratio == pytest.approx(expected)
    assert result["pair_tok_s_ratios"] == [pytest.approx(expected)]
    assert all(0 <= p["idle"] <= 1 for p in result["processes"])
    # The temporary worktrees are gone.
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def load_script():
    spec = importlib.util.spec_from_file_location(
        "checkout_ab", ROOT / "benchmarks" / "checkout_ab.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pairs_take_turns_at_running_first():
    ab = load_script()
    order = [label for pair in range(4) for label in ab.pair_order(pair)]
    assert order == ["old", "new", "new", "old", "old", "new", "new", "old"]


def test_each_pairs_ratio_is_its_own_new_over_its_own_old_whichever_ran_first():
    ab = load_script()
    results = [
        {"label": "old", "tok_s": 100.0},
        {"label": "new", "tok_s": 110.0},
        {"label": "new", "tok_s": 80.0},
        {"label": "old", "tok_s": 100.0},
    ]
    assert ab.pair_ratios(results) == [pytest.approx(1.1), pytest.approx(0.8)]


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
