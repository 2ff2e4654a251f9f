"""A project's claims scored as they stand today: claims.yaml's predictions and the design
hashes of the experiments' code now (run_checks.today_designs). What `score`, `site`, `list`,
`show` and the MCP tools report."""

from __future__ import annotations

from pathlib import Path

from claimbench.harness import run_checks, scoring
from claimbench.harness.claims import Claim
from claimbench.harness.results import StoredRun


def score_current(
    root: Path, claims: list[Claim], runs: list[StoredRun]
) -> list[scoring.ClaimScore]:
    """Each of ``claims`` (in ``root``'s project) scored from ``runs``, counting only the runs
    of today's prediction and design."""
    return scoring.score_claims(claims, runs, run_checks.today_designs(root, claims))
