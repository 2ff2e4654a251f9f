"""The site's history views: a claim page's History (per class, every run, the chart with flips
ringed) and the index's "Since last night", rendered from runs over five nights; and the
history chart on screen in headless Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from history_helpers import history_project, peer_record

from claimbench.harness import results
from claimbench.harness.claims import load_claims
from claimbench.site.render import render_site


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = history_project(tmp_path / "p")
    runs, _ = results.read_runs(root / "results")
    render_site(root, load_claims(root), runs, root / "site")
    return root / "site"


def _section(page: str, section_id: str) -> str:
    start = page.index(f'<section id="{section_id}">')
    return page[start : page.index("</section>", start)]


def test_the_claim_page_shows_every_run_per_class_and_a_chart(site: Path) -> None:
    history = _section((site / "claims" / "c.html").read_text(), "history")
    assert 'id="history-cpu"' in history and 'id="history-tpu"' in history
    for commit in ("a", "b", "c", "d", "e"):
        assert f"<code>{commit * 10}</code>" in history
    assert history.count('class="figure history-chart"') == 2
    chart = history[history.index('id="history-chart-cpu"') :]
    assert chart.index("<svg") < chart.index("</div>") and "1.5 · cpu" in chart
    # The 12-01 run's row says what changed from 11-30.
    assert "verdict flipped</span>" in history and "shift beyond noise: <code>gain" in history
    assert "design changed</span>" in history


def test_the_index_opens_with_what_changed_since_last_night(site: Path) -> None:
    index = (site / "index.html").read_text()
    section = _section(index, "since-last-night")
    assert index.index('id="since-last-night"') < index.index('id="peer"')
    assert "dated 2026-12-03 or after" in section
    assert 'href="claims/c.html#history-tpu"' in section and "new hardware class" in section
    assert section.count("unscored: design changed") == 2


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
def test_a_claim_s_history_chart_is_on_screen_in_headless_chromium(site: Path, tmp_path) -> None:
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed; CI must install it (apt-get install chromium)")
        pytest.skip("chromium is not installed")
    page = site / "claims" / "c.html"
    # The history section alone at the top of a page of its own, so the screenshot shows it.
    text = page.read_text()
    start, end = (
        text.index('<section id="history">'),
        text.index("</section>", text.index('<section id="history">')),
    )
    shot_page = page.with_name("c-history.html")
    shot_page.write_text(
        text[: text.index("<body")] + "<body>" + text[start:end] + "</section></body></html>"
    )
    common = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ]
    shot = tmp_path / "history.png"
    done = subprocess.run(
        [*common, f"--screenshot={shot}", "--window-size=1100,1400", shot_page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    # The chart is in the DOM the browser built: an SVG inside the history chart's figure.
    dom = subprocess.run(
        [*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    chart = dom[dom.index('id="history-chart-cpu"') :]
    assert chart.index("<svg") < chart.index("</div>")
    if os.environ.get("CLAIMBENCH_KEEP_SCREENSHOT"):
        shutil.copy(shot, os.environ["CLAIMBENCH_KEEP_SCREENSHOT"])


def test_the_engine_series_and_its_regression_are_on_the_index(tmp_path: Path) -> None:
    root = history_project(tmp_path / "p")
    runs, _ = results.read_runs(root / "results")
    records = [
        peer_record("2026-12-02", [100.0, 102.0, 98.0], [50.0, 51.0, 49.0], sha="b" * 40),
        peer_record("2026-12-03", [80.0, 81.0, 79.0], [50.0, 51.0, 49.0], sha="c" * 40),
    ]
    # TTFT p50 of each round: the night after, wholly above (lower is better: a regression).
    for rec, ttft in zip(records, ([10.0, 10.5, 9.5], [20.0, 20.5, 19.5]), strict=True):
        rec["result"]["ours"]["ttft_ms_rounds"] = {"p50": ttft, "p99": [30.0] * 3}
    render_site(root, load_claims(root), runs, root / "site", peer_records=records)
    index = (root / "site" / "index.html").read_text()
    engine = _section(index, "engine-history")
    assert "vllm · TPU v6e x1" in engine and engine.count("<code>cccccccccc</code>") == 1
    assert "ours tok/s: regression beyond noise" in engine
    assert "ours TTFT p50: regression beyond noise" in engine
    changes = _section(index, "since-last-night")
    assert "engine TPU v6e x1: ours tok/s regression beyond noise" in changes
    assert "engine TPU v6e x1: ours TTFT p50 regression beyond noise" in changes
    assert "<code>bbbbbbbbbb</code> → <code>cccccccccc</code>" in changes
