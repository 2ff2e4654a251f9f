"""A RunContext whose engines are the tiny random model, drafting with a tiny model too."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
from engine_helpers import TINY_MODEL, tiny_model

from claimbench.engine.build import build_engine
from claimbench.engine.config import EngineConfig
from claimbench.engine.kv.kv_cache import kv_bytes_per_token
from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import RunContext
from claimbench.harness.registry import load_experiment

ROOT = Path(__file__).resolve().parents[1]
TINY = {"batch": 2, "num_spec_tokens": 3, "proposer": "draft", "input_len": 12, "output_len": 10}


class TinySpecContext(RunContext):
    """Engines over the tiny random model; the draft is tiny_model(draft_seed): seed 0 is the
    target itself (every draft accepted), another seed a stranger (nearly all rejected). An
    engine given a ``model_path`` (spec_trials' control: the draft served plain) serves the
    draft model."""

    draft_seed = 0

    def engine(self, *, precompile=False, compile_cache=False, **overrides):
        options = dict(
            dtype="float32",
            kv_pool_bytes=64 * 8 * kv_bytes_per_token(TINY_MODEL, jnp.float32),
            page_size=8,
        )
        config = EngineConfig(**(options | overrides))
        served = tiny_model(self.draft_seed) if overrides.get("model_path") else tiny_model()
        engine = build_engine(config, model=served, draft_model=tiny_model(self.draft_seed))
        if precompile:
            engine.precompile()
        return engine


def run_tiny(claim_id: str, params: dict, draft_seed: int, trials: int = 2, seed: int = 0):
    """Run the claim's experiment at the tiny size; its measurements frame."""
    ctx = TinySpecContext(
        claim_id=claim_id,
        profile="quick",
        params=params,
        trials=trials,
        seed=seed,
        hardware={"platform": "cpu"},
        dtype="float32",
    )
    ctx.draft_seed = draft_seed
    load_experiment(ROOT, find_claim(load_claims(ROOT), claim_id)).run(ctx)
    return ctx.measurements_frame("run")


def values(frame, metric: str) -> list[float]:
    """The metric's per-trial values, trial order."""
    rows = frame[frame["metric"] == metric].sort_values("trial")
    return rows["value"].tolist()
