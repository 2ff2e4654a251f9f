"""`claimbench model info` on the shipped models."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from claimbench.cli.main import app


@pytest.mark.slow
def test_info_json_for_both_shipped_models() -> None:
    result = CliRunner().invoke(
        app, ["--dtype", "float32", "model", "info", "--windows", "4", "--json"]
    )
    assert result.exit_code == 0, result.output
    target, draft = json.loads(result.output)
    assert (target["name"], draft["name"]) == ("claimbench-tiny", "claimbench-tiny-draft")
    assert draft["params"] * 8 <= target["params"]
    assert target["weight_bytes"] == 4 * target["params"]  # loaded in f32
    for row in (target, draft):
        assert row["num_tokens"] == 4 * 256
        # Trained: far better than a uniform guess over the 4096-token vocabulary.
        assert row["loss_per_token"] < 0.7 * np.log(4096)
        assert row["ppl_per_token"] == pytest.approx(np.exp(row["loss_per_token"]))
        # Several bytes per token, so the per-byte loss is a fraction of the per-token loss.
        assert row["num_bytes"] > 2 * row["num_tokens"]
        assert row["loss_per_byte"] == pytest.approx(
            row["loss_per_token"] * row["num_tokens"] / row["num_bytes"]
        )


@pytest.mark.slow
def test_info_table() -> None:
    result = CliRunner().invoke(app, ["model", "info", "--windows", "2"])
    assert result.exit_code == 0, result.output
    assert "claimbench-tiny-draft" in result.output and "bits/B" in result.output


def test_info_rejects_bad_windows() -> None:
    result = CliRunner().invoke(app, ["model", "info", "--windows", "0"])
    assert result.exit_code == 2 and "--windows" in result.output
