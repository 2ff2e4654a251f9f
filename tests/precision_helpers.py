"""Shared by the precision experiments' tests: a tiny random model that reads the shipped
held-out text, and a run of one claim's experiment at tiny size."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import pandas as pd
from flax import nnx

from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import RunContext
from claimbench.harness.registry import load_experiment
from claimbench.models.checkpoint import default_model_path, save_model
from claimbench.models.config import ModelConfig
from claimbench.models.llama import LlamaForCausalLM
from claimbench.models.tokenizer import TOKENIZER_FILE, Tokenizer

ROOT = Path(__file__).resolve().parents[1]
TRIALS = 2


def write_tiny_model(path: Path, **overrides: Any) -> Path:
    """A 2-layer random model with the shipped tokenizer (so held-out windows tokenize),
    saved in bf16 like the shipped one: compiles fast, serves any experiment. ``overrides``
    change its ModelConfig fields."""
    source = default_model_path()
    tokenizer = Tokenizer.from_dir(source)
    cfg = ModelConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_id,
        eos_token_id=tokenizer.eos_id,
    )
    cfg = dataclasses.replace(cfg, **overrides)
    model = LlamaForCausalLM(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0))
    save_model(model, cfg, path, dtype="bfloat16")
    shutil.copy(source / TOKENIZER_FILE, path / TOKENIZER_FILE)
    return path


def run_experiment(claim_id: str, params: dict[str, Any], model_dir: Path) -> pd.DataFrame:
    """Run the claim's experiment for TRIALS trials; its measurements frame."""
    return run_context(claim_id, params, model_dir).measurements_frame("test")


def run_context(claim_id: str, params: dict[str, Any], model_dir: Path) -> RunContext:
    """Run the claim's experiment for TRIALS trials; its RunContext (records, engine configs)."""
    claim = find_claim(load_claims(ROOT), claim_id)
    ctx = RunContext(
        claim_id=claim_id,
        profile="quick",
        params=params,
        trials=TRIALS,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="bfloat16",
        model_option=model_dir,
    )
    load_experiment(ROOT, claim).run(ctx)
    return ctx


def assert_claim_metrics_recorded(claim_id: str, frame: pd.DataFrame) -> dict[str, list[float]]:
    """Each measured condition's metric has one finite measured value per trial; each analytic
    one exactly one analytic value, on trial 0 (never copied into later trials). Returns them."""
    claim = find_claim(load_claims(ROOT), claim_id)
    values = {}
    for condition in claim.prediction:
        rows = frame[frame["metric"] == condition.metric].sort_values("trial")
        analytic = condition.basis == "analytic"
        assert set(rows["evidence"]) == ({"analytic"} if analytic else {"cpu"}), condition.metric
        expected = [0] if analytic else list(range(TRIALS))
        assert rows["trial"].tolist() == expected, condition.metric
        assert all(math.isfinite(v) for v in rows["value"]), condition.metric
        values[condition.metric] = rows["value"].tolist()
    return values


def analytic_inputs(frame: pd.DataFrame, metric: str) -> dict[str, Any]:
    """The formula inputs stored with an analytic metric's single record."""
    row = frame[(frame["metric"] == metric) & (frame["evidence"] == "analytic")]
    assert len(row) == 1, f"{metric}: {len(row)} analytic records"
    return json.loads(row["labels"].item())["inputs"]


def by_label(frame: pd.DataFrame, metric: str, label: str = "setting") -> dict[str, float]:
    """{label value: value} of ``metric``'s rows (one row per label value expected)."""
    rows = frame[frame["metric"] == metric]
    labels = [json.loads(lb)[label] for lb in rows["labels"]]
    assert len(set(labels)) == len(labels), f"{metric}: repeated {label}s {labels}"
    return dict(zip(labels, rows["value"], strict=True))
