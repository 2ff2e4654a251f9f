"""ops/service.py: what `score`, `site`, `run`, `budget` and the MCP tools share, on the tiny
fake project (no runs: nothing here builds an engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from claimbench.harness.claims import load_claims
from claimbench.ledger import ledger
from claimbench.ops import service


def test_scoring_a_project_without_runs_counts_every_claim_not_run(project: Path) -> None:
    claims = load_claims(project)
    scored, path = service.score_and_write(project, project / "results", claims, [])
    assert scored.num_runs == 0 and [s.verdict for s in scored.scores] == ["not-run"] * len(claims)
    assert scored.summary().endswith(f" · {len(claims)} not-run")
    assert path == project / "results" / "scores.parquet" and path.is_file()


def test_a_site_is_built_from_the_runs_it_is_given(project: Path, tmp_path: Path) -> None:
    claims = load_claims(project)
    built = service.build_site(project, project / "results", claims, [], tmp_path / "out")
    assert built.index == tmp_path / "out" / "index.html" and built.index.is_file()
    assert (built.num_claims, built.num_runs) == (len(claims), 0)


def test_a_corrupt_ledger_refuses_site_budget_and_spend_before_writing(
    project: Path, tmp_path: Path
) -> None:
    store = project / "results"
    ledger.ledger_dir(store).mkdir(parents=True)
    (ledger.ledger_dir(store) / "bad.parquet").write_text("not parquet")
    claims = load_claims(project)
    with pytest.raises(service.ServiceError, match="bad.parquet"):
        service.build_site(project, store, claims, [], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(service.ServiceError, match="bad.parquet"):
        service.budget(project, store)
    with pytest.raises(service.ServiceError, match="bad.parquet"):
        service.spend_plan(project, store, claims[:1], "quick", None)
