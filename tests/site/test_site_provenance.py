"""The scoreboard beside every verdict: provenance, basis badges, scope reason, replications,
earlier predictions, indicative estimates; runs stored before provenance read as unknown."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from scoring_helpers import rows, store_run, write_experiment

from claimbench.harness import results
from claimbench.harness.claims import load_claims
from claimbench.site.render import render_site

CLAIMS = """\
- id: mixed
  part: 1
  title: Arithmetic and a measurement
  statement: Capacity doubles and quality holds.
  confidence: 0.8
  scope: any
  scope_reason: Pool arithmetic and perplexity do not depend on the chip.
  prediction:
    - {metric: capacity_ratio, op: ">=", value: 1.9, basis: analytic}
    - {metric: ppl_delta_pct, op: "<=", value: 0.5}
  refuted_if: r
- id: chip-bound
  part: 2
  title: A TPU claim
  statement: s
  confidence: 0.7
  scope: tpu
  scope_reason: The effect comes from the MXU's balance against HBM bandwidth.
  prediction:
    - {metric: gain, op: ">=", value: 1.5}
  refuted_if: r
- id: stored-long-ago
  part: 3
  title: A run from before provenance
  statement: s
  confidence: 0.6
  scope: any
  prediction:
    - {metric: gain, op: ">=", value: 1.5}
  refuted_if: r
"""
MODEL = {
    "name": "claimbench-tiny",
    "path": "/x/claimbench-tiny",
    "architecture": {"num_layers": 2, "num_params": 4_400_000},
    "weights_sha256": {"model.safetensors": "abcdef12" + "0" * 56},
}
HARDWARE = {
    "platform": "cpu",
    "device_kind": "cpu",
    "device_count": 1,
    "cpu_model": "Test CPU 9000",
}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "claims.yaml").write_text(textwrap.dedent(CLAIMS))
    claims = {c.id: c for c in load_claims(root)}
    for claim in claims.values():
        write_experiment(root, claim)
    store = root / "results"
    extra = {"model": MODEL, "hardware": HARDWARE}
    mixed = claims["mixed"]
    store_run(store, mixed, rows("ppl_delta_pct", [0.3, 0.9, 0.1]), hour=8, current=False)
    data = rows("capacity_ratio", [1.94], "analytic") + rows("ppl_delta_pct", [0.2, 0.2, 0.2])
    store_run(store, mixed, data, hour=9, origin="lab-a", extra_meta=extra, root=root)
    chip = claims["chip-bound"]
    store_run(store, chip, rows("gain", [2.0, 2.1, 2.2]), origin="lab-b", root=root)
    old = store_run(store, claims["stored-long-ago"], rows("gain", [2.0, 2.1, 2.2]), origin=None)
    meta = json.loads((old.path / "meta.json").read_text())
    for key in ("prediction_hash", "hardware"):
        meta.pop(key, None)
    meta["hardware"] = {"platform": "cpu"}  # no cpu_model, as stored before it was recorded
    (old.path / "meta.json").write_text(json.dumps(meta))
    runs, _ = results.read_runs(store)
    render_site(root, list(claims.values()), runs, root / "site")
    return root / "site"


def test_index_shows_provenance_beside_each_verdict(site):
    index = (site / "index.html").read_text()
    row = index.split('id="claim-mixed"')[1].split("</tr>")[0]
    for fragment in ("Test CPU 9000", "claimbench-tiny @abcdef12", "quick", "3 trials"):
        assert fragment in row
    assert "2026-11-29" in row and "origin lab-a" in row
    assert "1 run measured against an earlier prediction" in row
    assert "constant across trials" in row and "1.94" in row and "exact" in row
    chip = index.split('id="claim-chip-bound"')[1].split("</tr>")[0]
    assert "indicative-only" in chip and "indicative" in chip and "origin lab-b" in chip
    assert 'id="reliability"' in index or "nothing" in index


def test_claim_page_badges_scope_constant_and_replications(site):
    page = (site / "claims" / "mixed.html").read_text()
    assert "Pool arithmetic and perplexity do not depend on the chip." in page
    assert page.count('class="badge analytic"') >= 2 and 'class="badge measured"' in page
    assert "decided by <strong>analytic</strong> evidence" in page
    assert "identical values in every trial give no interval" in page
    assert "measured against an earlier prediction" in page
    # cpu group: one current run (scored) and one earlier; the current one agrees with itself.
    assert "1 of 1 scorable run agree" in page
    assert "<strong>scored</strong>" in page
    chip = (site / "claims" / "chip-bound.html").read_text()
    assert "The effect comes from the MXU" in chip
    assert "indicative: cpu evidence, outside the scope (tpu)" in chip


@pytest.mark.slow
def test_runs_stored_before_provenance_read_as_unknown(site):
    page = (site / "claims" / "stored-long-ago.html").read_text()
    assert "not-run" in page
    assert "lacks provenance: prediction hash" in page
    assert "missing or malformed" in page  # what the reason means
    assert "CPU model unknown" in page and ">unknown<" in page  # origin and model columns
    # The index still shows what was measured, greyed as not scored.
    index = (site / "index.html").read_text()
    row = index.split('id="claim-stored-long-ago"')[1].split("</tr>")[0]
    assert "prediction hash: not scored" in row and "2.1 [" in row
    assert "origin unknown" in row and "model unknown" in row
