"""`claimbench site`: default and --out locations, bad --out."""

from __future__ import annotations

import pytest
from test_cli_claims import assert_one_line_error, invoke


@pytest.mark.slow
def test_site_default_out(project):
    assert invoke("--root", str(project), "run", "--claim", "fake-pass").exit_code == 0
    result = invoke("--root", str(project), "site")
    assert result.exit_code == 0, result.output
    index = project / "site" / "index.html"
    assert index.is_file()
    assert "5 claim pages from 1 run(s)" in result.stdout
    assert "fake-pass" in index.read_text()


@pytest.mark.slow
def test_site_out_and_results_dir(project, tmp_path):
    store = tmp_path / "store"
    args = ["--root", str(project), "run", "--claim", "fake-fail", "--results-dir", str(store)]
    assert invoke(*args).exit_code == 0
    out = tmp_path / "published"
    result = invoke("--root", str(project), "site", "--out", str(out), "--results-dir", str(store))
    assert result.exit_code == 0, result.output
    assert "refuted" in (out / "index.html").read_text()
    assert (out / "claims" / "fake-fail.html").is_file()


@pytest.mark.slow
def test_site_out_is_a_file(project):
    (project / "taken").write_text("")
    assert_one_line_error(
        invoke("--root", str(project), "site", "--out", str(project / "taken")),
        "is not a directory",
    )
