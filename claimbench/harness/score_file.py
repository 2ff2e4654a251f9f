"""results/scores.parquet: the latest scores, replaced whole and atomically."""

from __future__ import annotations

import os
from pathlib import Path

from claimbench.harness import results, score_table, scoring


def write_scores(store: Path, scores: list[scoring.ClaimScore]) -> Path:
    """scores.parquet, replaced atomically so a reader never sees half a file."""
    store.mkdir(parents=True, exist_ok=True)
    path = store / results.SCORES_FILE
    tmp = store / f"{results.TMP_PREFIX}{results.SCORES_FILE}"
    try:
        score_table.scores_frame(scores).to_parquet(tmp, index=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
