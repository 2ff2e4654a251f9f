"""early-exit: each measured condition, with the exit decision replaced, lands on the other
side of its threshold (the real experiment at tiny size, one thing changed)."""

from __future__ import annotations

import dataclasses

import pytest
from counterfactual_helpers import assert_fails, assert_holds, metric_values
from engine_helpers import tiny_model
from tenant_exp_helpers import run_tiny, write_checkpoint

from claimbench.models.checkpoint import load_model, save_model
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


def exit_checkpoint(path, cfg_changes: dict, threshold: float):
    """write_checkpoint's tokenizer and model (its shape changed by ``cfg_changes``), with an
    exit head after layer 1 saved at ``threshold``."""
    write_checkpoint(path)
    if cfg_changes:
        model, _ = load_model(path, "float32")
        cfg = dataclasses.replace(model.cfg, **cfg_changes)
        save_model(tiny_model(0, cfg), cfg, path)
    model, _ = load_model(path, "float32")
    save_exit_heads(ExitHeads(model, (1,)), path, threshold=threshold, quality={})
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    # Threshold 0 saved: every decode token exits after layer 1 of 2.
    return exit_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", {}, 0.0)


@pytest.mark.slow
def test_never_exiting_skips_no_layer_at_batch_one(checkpoint):
    on = run_tiny(CLAIM, checkpoint, trials=1, base=TINY).measurements_frame("run")
    assert_holds(CLAIM, "layers_skipped_pct_b1", metric_values(on, "layers_skipped_pct_b1"))
    off = run_tiny(CLAIM, checkpoint, trials=1, base=TINY | {"counterfactual": "never-exit"})
    values = metric_values(off.measurements_frame("run"), "layers_skipped_pct_b1")
    assert_fails(CLAIM, "layers_skipped_pct_b1", values)


@pytest.mark.slow
def test_forced_exits_save_most_of_a_batched_step(tmp_path):
    # Wide layers, so a step's time is its layers' (not the host's): with every token forced
    # out after layer 1 of 4, a batched step skips three layers' work, far above 5%, against
    # the same exit machinery exiting nowhere.
    wide = {"hidden_size": 512, "intermediate_size": 2048, "num_layers": 4, "head_dim": 128}
    path = exit_checkpoint(tmp_path / "wide", wide, 0.99)
    params = TINY | {"output_len": 24, "counterfactual": "forced-exit"}
    frame = run_tiny(CLAIM, path, trials=1, base=params).measurements_frame("run")
    assert metric_values(frame, "layers_skipped_pct_b32") == [75.0]
    assert_fails(CLAIM, "step_saving_pct_b32", metric_values(frame, "step_saving_pct_b32"))


def test_an_unknown_counterfactual_is_named(checkpoint):
    with pytest.raises(ValueError, match="'exit-always'"):
        run_tiny(CLAIM, checkpoint, trials=1, base=TINY | {"counterfactual": "exit-always"})
