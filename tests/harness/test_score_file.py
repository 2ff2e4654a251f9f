"""scores.parquet is replaced through a temp file of its own writer: nothing at the temp name
an earlier version used (shared by every writer) is followed, and a new file is 0644."""

from __future__ import annotations

import stat

import pandas as pd

from claimbench.harness import results
from claimbench.harness.score_file import write_scores


def test_a_link_at_the_old_shared_temp_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    store = tmp_path / "results"
    store.mkdir()
    (store / f"{results.TMP_PREFIX}{results.SCORES_FILE}").symlink_to(victim)
    path = write_scores(store, [])
    assert victim.read_text() == "untouched"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert pd.read_parquet(path).empty
    leftovers = {p.name for p in store.iterdir()} - {results.SCORES_FILE}
    assert leftovers == {f"{results.TMP_PREFIX}{results.SCORES_FILE}"}  # only the planted link
