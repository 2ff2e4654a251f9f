"""Shared by the precision experiments' tests: a tiny random model that reads the shipped
held-out text, and a run of one claim's experiment at tiny size."""

from __future__ import annotations

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


def write_tiny_model(path: Path) -> Path:
    """A 2-layer random model with the shipped tokenizer (so held-out windows tokenize),
    saved in bf16 like the shipped one: compiles fast, serves any experiment."""
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
    model = LlamaForCausalLM(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0))
    save_model(model, cfg, path, dtype="bfloat16")
    shutil.copy(source / TOKENIZER_FILE, path / TOKENIZER_FILE)
    return path


def run_experiment(claim_id: str, params: dict[str, Any], model_dir: Path) -> pd.DataFrame:
    """Run the claim's experiment for TRIALS trials; its measurements frame."""
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
    return ctx.measurements_frame("test")


def assert_claim_metrics_recorded(claim_id: str, frame: pd.DataFrame) -> dict[str, list[float]]:
    """Every metric the claim predicts has one finite value per trial; returns them."""
    claim = find_claim(load_claims(ROOT), claim_id)
    values = {}
    for metric in {c.metric for c in claim.prediction}:
        rows = frame[frame["metric"] == metric].sort_values("trial")
        assert rows["trial"].tolist() == list(range(TRIALS)), metric
        assert all(math.isfinite(v) for v in rows["value"]), metric
        values[metric] = rows["value"].tolist()
    return values
