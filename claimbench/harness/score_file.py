"""results/scores.parquet: the latest scores, replaced whole and atomically."""

from __future__ import annotations

from pathlib import Path

from claimbench.harness import results, score_table, scoring
from claimbench.platform.files import replace_file


def write_scores(store: Path, scores: list[scoring.ClaimScore]) -> Path:
    """scores.parquet, replaced atomically so a reader never sees half a file; each writer
    fills its own temp file, so two `score` runs at once cannot rename one another's
    half-written file into place."""
    store.mkdir(parents=True, exist_ok=True)
    path = store / results.SCORES_FILE
    frame = score_table.scores_frame(scores)
    replace_file(path, lambda tmp: frame.to_parquet(tmp, index=False))
    return path
