"""scripts/push_results.sh: runners appending to one results branch at once lose nothing.

Two simulated runners (separate processes, separate clones) each store runs and ledger rows and
push them to one local bare repository at the same time; afterwards the branch holds every run
and every ledger row. A push the remote rejects is made again on the new tip.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from claimbench.ledger import ledger

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "push_results.sh"
NUM_BATCHES = 4

# One runner: NUM_BATCHES times, store a run directory and its ledger row, then push.
RUNNER = """
import json, subprocess, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from ledger_helpers import row
from claimbench.ledger import ledger

name, clone, store = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
for k in range({batches}):
    run_id = f"20261204T0{{k}}0000Z-{{name}}-{{k}}"
    run_dir = store / "runs" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "meta.json").write_text(json.dumps({{"run_id": run_id}}))
    ledger.append_rows(store, [row(run_id)])
    done = subprocess.run(
        ["bash", {script!r}, "--results-dir", str(store), "--message", f"{{name}} {{k}}",
         "--retries", "30"],
        cwd=clone, capture_output=True, text=True,
    )
    print(done.stdout, done.stderr, flush=True)
    if done.returncode != 0:
        sys.exit(done.returncode)
"""


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def runner_clone(tmp_path: Path, name: str, remote: Path) -> Path:
    """A checkout of the project with ``remote`` as origin, as a runner has."""
    clone = tmp_path / name
    clone.mkdir()
    git("init", "--quiet", "-b", "main", cwd=clone)
    (clone / "README").write_text("project\n")
    git("add", "README", cwd=clone)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "init", cwd=clone)
    git("remote", "add", "origin", str(remote), cwd=clone)
    return clone


def branch_store(tmp_path: Path, remote: Path) -> Path:
    """The results branch checked out: its results/ directory."""
    check = tmp_path / "check"
    git("clone", "--quiet", "--branch", "results", str(remote), str(check), cwd=tmp_path)
    return check / "results"


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    git("init", "--quiet", "--bare", str(bare), cwd=tmp_path)
    return bare


@pytest.mark.slow
def test_two_runners_pushing_at_once_lose_no_run_and_no_ledger_row(tmp_path, remote) -> None:
    code = RUNNER.format(tests=str(ROOT / "tests"), batches=NUM_BATCHES, script=str(SCRIPT))
    procs = []
    for name in ("v5e", "v6e"):
        clone = runner_clone(tmp_path, name, remote)
        store = tmp_path / f"{name}-results"
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code, name, str(clone), str(store)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    results = branch_store(tmp_path, remote)
    expected = {f"20261204T0{k}0000Z-{n}-{k}" for n in ("v5e", "v6e") for k in range(NUM_BATCHES)}
    assert {p.name for p in (results / "runs").iterdir()} == expected
    assert set(ledger.read_ledger(results)["run_id"]) == expected
    assert len(ledger.ledger_files(results)) == 2 * NUM_BATCHES
    # One commit per batch: a retried push made its commit again, it did not add a second.
    log = git("log", "--format=%s", "results", cwd=remote).splitlines()
    assert sorted(log) == sorted(f"{n} {k}" for n in ("v5e", "v6e") for k in range(NUM_BATCHES))


def test_a_rejected_push_is_made_again_on_the_new_tip(tmp_path, remote) -> None:
    # The remote refuses the first push (as it does when another runner pushed in between).
    hook = remote / "hooks" / "update"
    hook.write_text(
        '#!/bin/sh\nif [ -e "$GIT_DIR/reject-next" ]; then rm "$GIT_DIR/reject-next"; '
        'echo "branch moved" >&2; exit 1; fi\n'
    )
    hook.chmod(0o755)
    (remote / "reject-next").write_text("")
    clone = runner_clone(tmp_path, "runner", remote)
    store = tmp_path / "store"
    (store / "runs" / "r1").mkdir(parents=True)
    (store / "runs" / "r1" / "meta.json").write_text(json.dumps({"run_id": "r1"}))
    command = ["bash", str(SCRIPT), "--results-dir", str(store), "--message", "night"]
    done = subprocess.run(command, cwd=clone, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rejected (attempt 1 of 8)" in done.stdout and "pushed to results" in done.stdout
    assert (branch_store(tmp_path, remote) / "runs" / "r1" / "meta.json").is_file()
    # Pushing again with nothing new adds nothing; a run already on the branch is not rewritten.
    (store / "runs" / "r1" / "meta.json").write_text("changed locally")
    again = subprocess.run(command, cwd=clone, capture_output=True, text=True)
    assert again.returncode == 0 and "no new results" in again.stdout
    assert git("log", "--format=%s", "results", cwd=remote).splitlines() == ["night"]


def test_a_push_rejected_every_time_fails_after_the_retries(tmp_path, remote) -> None:
    hook = remote / "hooks" / "update"
    hook.write_text("#!/bin/sh\necho refused >&2\nexit 1\n")
    hook.chmod(0o755)
    clone = runner_clone(tmp_path, "runner", remote)
    store = tmp_path / "store"
    (store / "runs" / "r1").mkdir(parents=True)
    (store / "runs" / "r1" / "meta.json").write_text(json.dumps({"run_id": "r1"}))
    command = ["bash", str(SCRIPT), "--results-dir", str(store), "--message", "night"]
    done = subprocess.run([*command, "--retries", "2"], cwd=clone, capture_output=True, text=True)
    assert done.returncode == 1
    assert "still rejected the push after 2 attempts" in done.stderr
