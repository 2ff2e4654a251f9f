"""The claim page beside each rule: a never condition's positive control, a trial that failed
to run, a model-class note, in-scope classes that disagree, and why runs are not scored."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from scoring_helpers import rows, store_run, write_experiment

from claimbench.harness import results
from claimbench.harness.claims import load_claims
from claimbench.site.render import render_site

CLAIMS = """\
- id: victim
  part: 1
  title: The top tier is never preempted
  statement: Choosing the victim by fair share never preempts the top tier.
  confidence: 0.8
  scope: any
  prediction:
    - {metric: top_tier_preemptions, op: "<=", value: 0}
    - {metric: gain, op: ">=", value: 1.5}
  refuted_if: r
- id: quality
  part: 2
  title: Quantized quality
  statement: s
  confidence: 0.7
  scope: any
  prediction:
    - {metric: ppl_delta_pct, op: "<=", value: 1.0, model_class: 8b}
  refuted_if: r
"""
TINY = {
    "model": {
        "name": "claimbench-tiny",
        "architecture": {"num_params": 4_196_608},
        "weights_sha256": {"model.safetensors": "b" * 64},
    }
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
    victim = claims["victim"]
    cpu = (
        rows("top_tier_preemptions", [0, 0, 0, 0])
        + rows("top_tier_preemptions_control", [3, 1, 2, 5])
        + rows("gain", [2.0, 2.1, 9.0, 2.2])
        + [
            ("realised_load", t, load, "cpu", "x", {"target": 2.0, "tolerance": 0.25})
            for t, load in enumerate([2.0, 1.9, 1.1, 2.1])
        ]
        + [("trial_off_target", 2, 1.0, "cpu")]
    )
    store_run(store, victim, cpu, hour=9, root=root)
    tpu = rows("top_tier_preemptions", [0, 1, 0], "tpu") + rows("gain", [2.0, 2.1, 2.2], "tpu")
    store_run(store, victim, tpu, hour=10, root=root, platform="tpu")
    dirty = {"git": {"sha": "a" * 40, "dirty": True}}
    store_run(store, victim, rows("gain", [2, 2.1, 2.2]), hour=11, root=root, extra_meta=dirty)
    store_run(store, victim, rows("gain", [2, 2.1, 2.2]), hour=12)  # no design recorded
    ppl = rows("ppl_delta_pct", [0.1, 0.2, 0.3], unit="%")
    store_run(store, claims["quality"], ppl, root=root, extra_meta=TINY)
    runs, _ = results.read_runs(store)
    render_site(root, list(claims.values()), runs, root / "site")
    return root / "site"


@pytest.mark.slow
def test_claim_page_shows_each_rule(site):
    page = (site / "claims" / "victim.html").read_text()
    # The cpu run's control beside the condition, and its failed trial.
    assert "top_tier_preemptions_control" in page and "3, 1, 5" in page
    assert "saw the event in 3 of 3 trials" in page
    assert "trial 2 failed to run: realised load 1.1x" in page
    # The tpu run refutes; the cpu run, also in scope, confirms: the page says they disagree.
    assert "in-scope hardware classes disagree" in page and "cpu says confirmed" in page
    assert "1 run measured from a tree with uncommitted changes" in page
    assert "1 run measured with an earlier design" in page
    index = (site / "index.html").read_text()
    row = index.split('id="claim-victim"')[1].split("</tr>")[0]
    assert "refuted" in row and "cpu (in scope) says confirmed" in row
    quality = (site / "claims" / "quality.html").read_text()
    assert "indicative-only" in quality and 'id="model-class"' in quality
    assert "4.2M-parameter model, not of the 8b class" in quality
    # The banner gives the model class as the reason, not the hardware scope (cpu is in scope).
    banner = quality.split('id="provenance"')[1].split("</p>")[0]
    assert "indicative: measured on a 4.2M-parameter model" in banner
    assert "outside the claim's scope" not in banner
    decides = quality.split('id="what-decides"')[1].split("</p>")[0]
    assert "8b class" in decides and "claimbench run --claim quality --profile full" in decides
