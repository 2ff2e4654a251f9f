"""What the CLI prints is printed as it is: text holding "[...]" (a path, a claim's title, an id
typed by the user, an install hint) is not read as rich markup. It was: "[/x]" in an error
message was a rich MarkupError traceback, and "claimbench[serve]" lost its "[serve]"."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import assert_one_line_error, invoke

from claimbench.cli import common

TITLE = "[b]TPUs[/] [/x]"


def test_an_error_naming_a_path_with_brackets_is_one_line(tmp_path: Path):
    missing = tmp_path / "a[/b]"
    result = invoke("--root", str(missing), "list")
    assert_one_line_error(result, f"--root {missing} is not a directory")


def test_an_unknown_id_with_brackets_is_echoed_as_typed():
    assert_one_line_error(invoke("show", "x[/]y"), "no claim 'x[/]y' in claims.yaml")
    assert_one_line_error(invoke("show", "x[bold]y"), "no claim 'x[bold]y' in claims.yaml")


def test_claim_text_with_brackets_is_shown_as_written(project: Path, monkeypatch):
    monkeypatch.setattr(common.console, "width", 200)  # the table folds titles at 80 columns
    claims = project / "claims.yaml"
    claims.write_text(claims.read_text().replace("Fake claim about TPUs", f"'{TITLE}'"))
    shown = invoke("--root", str(project), "show", "fake-tpu")
    assert shown.exit_code == 0, shown.output
    assert TITLE in shown.stdout
    listed = invoke("--root", str(project), "list")
    assert listed.exit_code == 0, listed.output
    assert TITLE in listed.stdout


def test_a_skipped_run_with_brackets_in_its_name_is_named_as_it_is(project: Path):
    assert invoke("--root", str(project), "run", "--claim", "fake-pass").exit_code == 0
    odd = project / "results" / "runs" / "odd[red]run"
    odd.mkdir()
    result = invoke("--root", str(project), "score")
    assert result.exit_code == 0, result.output
    assert f"skipped {odd}:" in result.stderr
    assert "confirmed" in result.stdout  # the verdict column is still there, styled
