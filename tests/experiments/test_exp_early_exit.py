"""The early-exit experiment at a tiny size: exit layers counted, the arms alternated."""

from __future__ import annotations

import pytest
from tenant_exp_helpers import assert_claim_metrics_recorded, run_tiny, write_checkpoint

from claimbench.models.checkpoint import load_model
from claimbench.models.exit_heads import ExitHeads, save_exit_heads

CLAIM = "early-exit"
TINY = {
    "engine": {
        "dtype": "float32",
        "page_size": 8,
        "max_num_batched_tokens": 32,
        "max_model_len": 128,
    },
    "batch_small": 1,
    "batch_large": 4,
    "prompt_len": 6,
    "output_len": 6,
    "quality_windows": 2,
    "quality_len": 8,
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = write_checkpoint(tmp_path_factory.mktemp("ckpt") / "model")
    model, _ = load_model(path, "float32")
    quality = {"top1_agreement": 0.5, "ppl_exit": 9.0, "ppl_full": 8.0, "layers_skipped_pct": 50}
    save_exit_heads(ExitHeads(model, (1,)), path, threshold=0.0, quality={"0.0": quality})
    return path


def _values(frame, metric):
    return frame.loc[frame["metric"] == metric, "value"].tolist()


@pytest.mark.slow
def test_threshold_zero_skips_half_of_two_layers(checkpoint):
    ctx = run_tiny(CLAIM, checkpoint, trials=2, base=TINY)
    frame = assert_claim_metrics_recorded(ctx)
    # Every decode token exits after layer 1 of 2: half the layers skipped, at any batch.
    assert _values(frame, "layers_skipped_pct_b1") == [50.0, 50.0]
    assert _values(frame, "layers_skipped_pct_b32") == [50.0, 50.0]
    assert _values(frame, "steps_running_all_layers_b32") == [0.0, 0.0]
    assert _values(frame, "heldout_top1_agreement") == [0.5]
    # Served quality: every teacher-forced token exits after layer 1 of 2.
    assert _values(frame, "served_layers_skipped_pct") == [50.0]
    assert len(_values(frame, "greedy_token_agreement_b32")) == 2
    saved = ctx.frames()["steps"]
    large = saved[saved["batch"] == 4]
    order = [list(dict.fromkeys(large.loc[large["trial"] == t, "mode"])) for t in (0, 1)]
    assert order == [["off", "never", "on"], ["never", "on", "off"]]
    assert all(len(x) == 0 for x in large.loc[large["mode"] == "off", "exit_layers"])
    # The "never" arm runs the exit machinery and exits nowhere: every token runs both layers.
    never = large.loc[large["mode"] == "never", "exit_layers"]
    assert all(set(x) <= {0, 2} for x in never) and any(2 in x for x in never)
    assert len(_values(frame, "exit_overhead_pct_b32")) == 2


@pytest.mark.slow
def test_never_confident_runs_every_layer(checkpoint):
    ctx = run_tiny(CLAIM, checkpoint, trials=1, base=TINY | {"threshold": 2.0})
    frame = assert_claim_metrics_recorded(ctx)
    assert _values(frame, "layers_skipped_pct_b1") == [0.0]
    assert _values(frame, "steps_running_all_layers_b32") == [1.0]
    assert _values(frame, "arms_outputs_match_b32") == [1.0]
    # Never exiting: served outputs and teacher-forced predictions are the ordinary model's.
    assert _values(frame, "greedy_token_agreement_b32") == [1.0]
    assert _values(frame, "greedy_leading_agree_b32") == [6.0]
    assert _values(frame, "served_top1_agreement") == [1.0]
    assert _values(frame, "served_ppl_exit") == _values(frame, "served_ppl_full")
    assert _values(frame, "heldout_top1_agreement") == []  # no quality saved at 2.0


@pytest.mark.slow
def test_bad_threshold_is_refused(checkpoint):
    with pytest.raises(ValueError, match="threshold"):
        run_tiny(CLAIM, checkpoint, trials=1, base=TINY | {"threshold": -1})
