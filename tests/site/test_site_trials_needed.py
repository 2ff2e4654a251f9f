"""An inconclusive claim's page says how many more trials would decide it, or that none would."""

from __future__ import annotations

import textwrap
from pathlib import Path

from scoring_helpers import rows, store_run, write_experiment

from claimbench.harness import results
from claimbench.harness.claims import load_claims
from claimbench.site.render import render_site

CLAIMS = """\
- id: near
  part: 1
  title: Near its threshold
  statement: s
  confidence: 0.7
  scope: any
  prediction:
    - {metric: gain, op: ">=", value: 1.5}
  refuted_if: r
- id: level
  part: 1
  title: On its threshold
  statement: s
  confidence: 0.7
  scope: any
  prediction:
    - {metric: gain, op: ">=", value: 1.5}
  refuted_if: r
"""


def test_inconclusive_pages_say_what_more_trials_would_do(tmp_path: Path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "claims.yaml").write_text(textwrap.dedent(CLAIMS))
    claims = {c.id: c for c in load_claims(root)}
    for claim in claims.values():
        write_experiment(root, claim)
    store = root / "results"
    store_run(store, claims["near"], rows("gain", [1.6, 1.7, 1.8]), root=root)
    store_run(store, claims["level"], rows("gain", [1.0, 2.0, 1.5, 1.49, 1.51]), hour=11, root=root)
    runs, _ = results.read_runs(store)
    render_site(root, list(claims.values()), runs, root / "site")
    near = (root / "site" / "claims" / "near.html").read_text()
    section = near.split('id="trials-needed"')[1].split("</div>")[0]
    assert "more trial(s)" in section and "--until-decided" in section
    on = (root / "site" / "claims" / "level.html").read_text()
    assert "too close to call at this precision" in on.split('id="trials-needed"')[1]
