"""benchmarks/page_adjacency.py at tiny size: the two placements serve the same workload with
the same greedy outputs, and only the allocator's keeps a sequence's pages adjacent."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import page_adjacency  # noqa: E402


@pytest.mark.slow
def test_placements_side_by_side_at_tiny_size():
    args = page_adjacency.parse_args(
        ["--rounds", "1", "--requests", "8", "--max-num-seqs", "8", "--output-len", "32"]
        + ["--min-input", "32", "--max-input", "64", "--max-num-batched-tokens", "64"]
    )
    result = page_adjacency.run(args)
    assert result["greedy_identical"]
    # After the warm-up the free queue holds released pages in descending runs: taken in
    # queue order they are rarely p, p + 1; placed, most of a table's pages are.
    assert result["queue"]["adjacent_share"] < 0.3 < 0.6 < result["adjacent"]["adjacent_share"]
    assert set(result["adjacent"]) == set(result["queue"])
    report = page_adjacency.report(result)
    assert "adjacent / queue: tok/s" in report and "greedy outputs identical: True" in report
