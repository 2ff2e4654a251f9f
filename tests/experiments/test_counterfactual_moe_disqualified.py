"""moe-disqualified: its measured condition, with the batch's diversity taken away (one prompt
served 32 times), lands on the other side of its threshold (the real experiment, tiny MoE)."""

from __future__ import annotations

from pathlib import Path

import pytest
from counterfactual_helpers import assert_fails, metric_values
from precision_helpers import run_experiment
from test_exp_moe_disqualified import PARAMS, write_tiny_moe

CLAIM = "moe-disqualified"


@pytest.mark.slow
def test_one_prompt_repeated_touches_only_one_tokens_experts(tmp_path: Path) -> None:
    path = write_tiny_moe(tmp_path / "moe", collapsed=False)
    params = {**PARAMS, "moe_model": str(path), "counterfactual": "same-prompt"}
    frame = run_experiment(CLAIM, params, path)
    values = metric_values(frame, "experts_touched_pct_b32")
    # 32 copies of one sequence route as one token does: 2 of 8 experts in every layer.
    assert values == [25.0] * len(values)
    assert_fails(CLAIM, "experts_touched_pct_b32", values)


def test_an_unknown_counterfactual_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'one-expert'"):
        run_experiment(CLAIM, {**PARAMS, "counterfactual": "one-expert"}, tmp_path)
