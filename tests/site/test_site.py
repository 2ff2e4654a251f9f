"""The scoreboard site: rendered pages, self-containment, and a load in headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from claimbench.harness import calibration, results
from claimbench.harness.claims import load_claims
from claimbench.site import charts
from claimbench.site.render import render_site

EXTERNAL = re.compile(
    r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|@import|<script\s[^>]*src|<link\s""",
    re.IGNORECASE,
)


@pytest.fixture
def rendered(project: Path) -> Path:
    """The fake project with two runs (fake-pass, fake-tpu), rendered to project/site."""
    from cli_helpers import invoke

    for claim_id in ("fake-pass", "fake-tpu"):
        assert invoke("--root", str(project), "run", "--claim", claim_id).exit_code == 0
    runs, _ = results.read_runs(project / "results")
    render_site(project, load_claims(project), runs, project / "site")
    return project / "site"


@pytest.mark.slow
def test_pages_exist_and_hold_the_table(rendered):
    index = (rendered / "index.html").read_text()
    assert '<table id="claims">' in index
    for claim_id in ("fake-pass", "fake-fail", "fake-tpu", "fake-broken", "fake-unwritten"):
        assert f'href="claims/{claim_id}.html"' in index
        assert (rendered / "claims" / f"{claim_id}.html").is_file()
    assert "1 confirmed" in index and "1 indicative only" in index and "3 not run" in index
    assert "no experiment yet" in index
    assert "$0.00 of $100" in index
    assert "<svg" in index  # the calibration diagram, inline


@pytest.mark.slow
def test_claim_page(rendered):
    page = (rendered / "claims" / "fake-pass.html").read_text()
    assert "The fake score is at least 1." in page
    assert "The fake score is confidently below 1." in page  # refuted_if
    assert "2, 2.01, 2.02" in page  # trial values
    # Unit x: geometric mean 2.01 and its log-space t interval 2.01 * exp(+-4.303 * 0.00498 /
    # sqrt(3)) = [1.99, 2.03].
    assert "2.01 [1.99, 2.03]" in page
    assert '<table id="runs">' in page
    assert "Fake figure" in page and "runs=1" in page  # the experiment's figures() hook
    assert page.count("<svg") >= 2  # the condition chart and the figure
    tpu = (rendered / "claims" / "fake-tpu.html").read_text()
    assert "outside scope: indicative" in tpu


@pytest.mark.slow
def test_site_is_self_contained(rendered):
    for page in [rendered / "index.html", *(rendered / "claims").iterdir()]:
        text = page.read_text()
        assert not EXTERNAL.search(text), (page.name, EXTERNAL.search(text).group(0))
        assert "<?xml" not in text and "<!DOCTYPE svg" not in text


@pytest.mark.slow
def test_figures_with_external_refs_or_errors_are_left_out(project):
    fake = project / "experiments" / "fake.py"
    fake.write_text(
        fake.read_text().replace(
            "<text x='0' y='15'>", "<image href='https://example.org/x.png'/><text>"
        )
    )
    from cli_helpers import invoke

    assert invoke("--root", str(project), "run", "--claim", "fake-pass").exit_code == 0
    runs, _ = results.read_runs(project / "results")
    render_site(project, load_claims(project), runs, project / "site")
    page = (project / "site" / "claims" / "fake-pass.html").read_text()
    assert "example.org" not in page and "references an external URL" in page

    fake.write_text(fake.read_text() + "\ndef figures(run_dirs):\n    raise OSError('gone')\n")
    render_site(project, load_claims(project), runs, project / "site")
    page = (project / "site" / "claims" / "fake-pass.html").read_text()
    assert "figures() failed" in page and "gone" in page


@pytest.mark.slow
def test_charts_are_inline_svg():
    svg = charts.calibration_svg(calibration.calibration([]))
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert "no claims decided in scope yet" in svg


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
def test_site_loads_in_headless_chromium(rendered, tmp_path):
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed; CI must install it (apt-get install chromium)")
        pytest.skip("chromium is not installed")
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--dump-dom",
        (rendered / "index.html").as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert '<table id="claims">' in dom
    assert 'id="claim-fake-pass"' in dom
    assert "confirmed" in dom
    assert "<svg" in dom


_ID = re.compile(r'<(\w+)\b[^>]*\bid="([^"]+)"')


def defined_ids(page: str) -> dict[str, set[str]]:
    """Every element id in ``page`` -> the distinct texts of the elements defining it (the
    opening tag through its closing tag, or the tag alone where it closes itself)."""
    found: dict[str, set[str]] = {}
    for match in _ID.finditer(page):
        tag, start = match.group(1), match.start()
        opening_end = page.index(">", start)
        if page[opening_end - 1] == "/":
            end = opening_end + 1
        else:
            end = page.index(f"</{tag}>", start) + len(f"</{tag}>")
        found.setdefault(match.group(2), set()).add(page[start:end])
    return found


@pytest.mark.slow
def test_a_rebuild_from_the_same_runs_writes_the_same_pages(rendered, project):
    from datetime import UTC, datetime

    import pandas as pd
    from ledger_helpers import row

    runs, _ = results.read_runs(project / "results")
    now = datetime(2026, 1, 2, tzinfo=UTC)
    # With a ledger the index holds two charts (calibration, spend).
    ledger = pd.DataFrame([row("r1", "fake-pass"), row("r2", "fake-tpu", usd=1.5)])
    first, second = project / "first", project / "second"
    for out in (first, second):
        render_site(project, load_claims(project), runs, out, now=now, ledger=ledger)
    pages = sorted(p.relative_to(first) for p in first.rglob("*.html"))
    assert pages == sorted(p.relative_to(second) for p in second.rglob("*.html"))
    for page in pages:
        text = (first / page).read_text()
        assert text == (second / page).read_text(), page
        # The page inlines several SVGs: an id two of them use must define the same thing.
        clashes = {i: d for i, d in defined_ids(text).items() if len(d) > 1}
        assert not clashes, (page, clashes)
