"""benchmarks/verify_step.py and benchmarks/speculative.py: their inputs and workloads."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from claimbench.engine.config import EngineConfig
from claimbench.models.checkpoint import default_model_path
from claimbench.models.tokenizer import Tokenizer

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_self_repetition_counts_repeated_4_grams():
    speculative = _load("speculative")
    # Positions 4..8 follow the 4-grams (1234), (2341), (3412), (4123), (1234): only the last
    # occurred before.
    assert speculative.self_repetition([1, 2, 3, 4, 1, 2, 3, 4, 9]) == pytest.approx(1 / 5)
    assert speculative.self_repetition(list(range(20))) == 0.0


def test_repeating_prompt_ends_on_a_token_boundary():
    speculative = _load("speculative")
    tokenizer = Tokenizer.from_dir(default_model_path())
    prompt = tokenizer.encode(speculative.repeated_text(3))
    follow = tokenizer.encode(speculative.REPEATED_BLOCK * 5)
    assert follow[: len(prompt)] == prompt
    # The continuation is the block's second line on: its first token folds in the newline.
    assert tokenizer.decode(follow[len(prompt) : len(prompt) + 1]).startswith("\n")
    continuation = follow[len(prompt) :]
    assert speculative.block_continued(tokenizer, continuation[:6]) == 6
    assert speculative.block_continued(tokenizer, continuation[:3] + [0, 0]) == 3


@pytest.mark.slow
def test_verify_step_inputs_lay_out_decode_and_verify_chunks():
    verify_step = _load("verify_step")
    cfg = EngineConfig(
        speculative="ngram",
        num_spec_tokens=4,
        max_num_seqs=8,
        max_num_batched_tokens=40,
        max_model_len=64,
    )
    inputs = verify_step.step_inputs(cfg, batch=3, context=20, width=5)
    md = inputs.md
    np.testing.assert_array_equal(md.cu_q_lens[:5], [0, 5, 10, 15, 15])
    np.testing.assert_array_equal(md.kv_lens[:4], [25, 25, 25, 0])
    np.testing.assert_array_equal(md.distribution, [0, 0, 3])  # verify chunks: mixed group
    np.testing.assert_array_equal(inputs.num_draft[:4], [4, 4, 4, 0])
    np.testing.assert_array_equal(inputs.logits_indices[1], [5, 6, 7, 8, 9])
    np.testing.assert_array_equal(inputs.positions[5:10], np.arange(20, 25))
    plain = verify_step.step_inputs(
        EngineConfig(max_num_seqs=8, max_num_batched_tokens=40, max_model_len=64), 3, 20, 1
    )
    np.testing.assert_array_equal(plain.md.distribution, [3, 3, 3])


@pytest.mark.slow
def test_verify_step_benchmark_runs_side_by_side():
    cmd = [sys.executable, str(BENCHMARKS / "verify_step.py"), "--backend", "xla"]
    cmd += ["--batches", "1,2", "--reps", "1", "--context", "16", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [r["batch"] for r in rows] == [1, 2]
    assert all(r[f"{arm}_ms"] > 0 for r in rows for arm in ("decode", "verify_prefill_path"))
