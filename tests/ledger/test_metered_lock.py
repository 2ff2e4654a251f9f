"""One metered run at a time per results store, across processes (ledger/metered_lock.py).

The budget gate compares a run's estimate with the ledger, which a run's spend reaches only
when it ends: two metered runs started from different processes could each fit the remaining
budget and together spend past it. A second metered run anywhere is refused at once while the
first holds the store's lock; the lock goes with the holder's process, however it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, invoke
from ledger_helpers import V6E, with_settings
from metered_lock_helpers import holder, try_hold

from claimbench.hardware import detection
from claimbench.hardware.chips import PRICE_ENV_VAR
from claimbench.ledger import metered_lock


@pytest.fixture
def on_v6e(monkeypatch):
    """The harness sees one TPU v6e, a metered chip (the experiments are fake)."""
    monkeypatch.delenv(PRICE_ENV_VAR, raising=False)
    real = detection.detect_hardware
    monkeypatch.setattr(detection, "detect_hardware", lambda: {**real(), **V6E})


def runs(results: Path) -> list[Path]:
    return sorted((results / "runs").iterdir()) if (results / "runs").is_dir() else []


def test_a_second_process_is_refused_while_the_first_holds_the_lock(tmp_path: Path) -> None:
    store = tmp_path / "results"
    with holder(store) as first:
        second = try_hold(store)
        assert second.returncode == 1, second.stderr
        assert f"another metered run (pid {first.pid} since " in second.stdout
        with pytest.raises(metered_lock.MeteredRunBusy, match=str(store)):
            metered_lock.hold(store)
    after = try_hold(store)
    assert after.returncode == 0, after.stdout + after.stderr


def test_a_holder_that_dies_leaves_no_lock_behind(tmp_path: Path) -> None:
    store = tmp_path / "results"
    with holder(store) as first:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        after = try_hold(store)
    assert after.returncode == 0, after.stdout + after.stderr


def test_a_lock_handed_to_a_child_stays_held_until_the_child_exits(tmp_path: Path) -> None:
    store = tmp_path / "results"
    fd = metered_lock.hold(store)
    adopt = (
        "import sys\nfrom claimbench.ledger import metered_lock\n"
        "metered_lock.adopt(int(sys.argv[1]))\nprint('held', flush=True)\nsys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", adopt, str(fd)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        pass_fds=(fd,),
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "held\n"
        os.close(fd)  # the parent lets go: the child's copy keeps the lock
        refused = try_hold(store)
        assert refused.returncode == 1 and f"(pid {child.pid} since " in refused.stdout
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)
    assert try_hold(store).returncode == 0


def test_adopting_a_descriptor_that_does_not_hold_the_lock_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "results"
    with holder(store):
        other = os.open(metered_lock.lock_path(store), os.O_RDWR)
        try:
            with pytest.raises(metered_lock.MeteredRunBusy, match="was not held"):
                metered_lock.adopt(other)
        finally:
            os.close(other)


def test_metered_cli_run_is_refused_while_another_runs_and_runs_after(
    project: Path, on_v6e
) -> None:
    with_settings(project)
    results = project / "results"
    args = ("--root", str(project), "run", "--claim", "fake-pass", "--profile", "full")
    with holder(results) as first:
        refused = invoke(*args)
        assert_one_line_error(refused, f"another metered run (pid {first.pid} since ")
        assert runs(results) == []
        # --over-budget overrides the budget, not the lock: the other run's estimate counted
        # on this money too.
        assert_one_line_error(invoke(*args, "--over-budget"), "another metered run")
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert len(runs(results)) == 1
    assert try_hold(results).returncode == 0  # released when the run ended


def test_an_unmetered_run_is_not_held_up_by_a_metered_one(project: Path) -> None:
    results = project / "results"
    with holder(results):
        result = invoke("--root", str(project), "run", "--claim", "fake-pass")
        assert result.exit_code == 0, result.output
    assert len(runs(results)) == 1
