"""A place a command cannot write (a path under a regular file, a store that is a file) gets
one line naming it and exit 2, never a traceback, and nothing is measured first."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, invoke


@pytest.fixture
def blocked(tmp_path: Path) -> Path:
    """A regular file: nothing can be created under it."""
    path = tmp_path / "a-file"
    path.write_text("not a directory")
    return path


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        (["site", "--out", "{blocked}/site"], "{blocked}/site: Not a directory"),
        (["score", "--results-dir", "{blocked}"], "--results-dir {blocked} is not a directory"),
        (["site", "--results-dir", "{blocked}/r"], "is not a directory"),
        (
            ["run", "--claim", "fake-pass", "--results-dir", "{blocked}/r"],
            "cannot create the results store {blocked}/r: Not a directory",
        ),
        (["tenants", "add", "a", "--file", "{blocked}/t.yaml"], "{blocked}/t.yaml: Not a dir"),
        (["agents", "add", "a", "--file", "{blocked}/a.yaml"], "{blocked}/a.yaml: Not a dir"),
    ],
)
def test_an_unwritable_place_is_one_line(project, blocked, command, fragment):
    args = [a.format(blocked=blocked) for a in command]
    result = invoke("--root", str(project), *args)
    assert_one_line_error(result, fragment.format(blocked=blocked))


def test_run_refuses_an_unwritable_store_before_measuring(project, blocked):
    result = invoke(
        "--root", str(project), "run", "--claim", "fake-pass", "--results-dir", str(blocked / "r")
    )
    assert result.exit_code == 2
    assert "stored" not in result.output  # no claim ran, none was lost


def test_a_new_results_dir_is_created_by_run(project, tmp_path):
    store = tmp_path / "new-store"
    assert (
        invoke(
            "--root", str(project), "run", "--claim", "fake-pass", "--results-dir", str(store)
        ).exit_code
        == 0
    )
    assert len(list((store / "runs").iterdir())) == 1


def test_budget_reads_a_store_not_made_yet_as_nothing_spent_but_refuses_a_file(project, blocked):
    # The nightly asks for the budget before its first run has made the store.
    fresh = invoke("--root", str(project), "budget", "--results-dir", str(blocked.parent / "new"))
    assert fresh.exit_code == 0 and "spent $0.00" in fresh.output
    assert not (blocked.parent / "new").exists()
    a_file = invoke("--root", str(project), "budget", "--results-dir", str(blocked))
    assert_one_line_error(a_file, f"--results-dir {blocked} is not a directory")
