"""Running the multi-tenant experiments at a tiny size on a random checkpoint."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from engine_helpers import tiny_model
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from claimbench.harness import evidence_rules
from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import RunContext
from claimbench.harness.registry import load_experiment
from claimbench.models.checkpoint import save_model
from claimbench.models.config import ModelConfig
from claimbench.models.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[1]

# Small enough that one run takes seconds; long enough that queues form and drain.
TINY_ENGINE_PARAMS = {
    "engine": {
        "dtype": "float32",
        "page_size": 8,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 32,
        "max_model_len": 128,
    },
    "compile_cache": False,
    "prompt_len": [4, 12],
    "output_len": [4, 8],
    "saturation_requests": 12,
}


def write_checkpoint(path: Path) -> Path:
    """A 2-layer random model with a 300-token byte-level BPE tokenizer."""
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    hf.train_from_iterator(["def add(a, b):\n    return a + b\n"] * 20, trainer)
    cfg = ModelConfig(
        vocab_size=hf.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        bos_token_id=0,
        eos_token_id=1,
    )
    save_model(tiny_model(0, cfg), cfg, path)
    Tokenizer(hf, 0, 1).save(path)
    return path


def experiment(claim_id: str):
    return load_experiment(ROOT, find_claim(load_claims(ROOT), claim_id))


def run_tiny(
    claim_id: str, checkpoint: Path, trials: int = 2, *, base: dict | None = None, **params
) -> RunContext:
    """Run the claim's experiment with ``base`` (default: the TINY_ENGINE_PARAMS its
    DEFAULT_PARAMS know), ``params`` on top, on ``checkpoint``."""
    if base is None:
        known = experiment(claim_id).DEFAULT_PARAMS
        base = {k: v for k, v in TINY_ENGINE_PARAMS.items() if k in known}
    ctx = RunContext(
        claim_id=claim_id,
        profile="quick",
        params=base | params,
        trials=trials,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="float32",
        model_option=checkpoint,
    )
    experiment(claim_id).run(ctx)
    return ctx


def claim_metrics(claim_id: str) -> list[str]:
    return [c.metric for c in find_claim(load_claims(ROOT), claim_id).prediction]


def assert_claim_metrics_recorded(ctx: RunContext) -> pd.DataFrame:
    """Every metric the claim predicts has one finite value per trial; returns the frame."""
    frame = ctx.measurements_frame("run")
    for metric in claim_metrics(ctx.claim_id):
        rows = frame[frame["metric"] == metric]
        assert sorted(rows["trial"]) == list(range(ctx.trials)), metric
        assert all(math.isfinite(v) for v in rows["value"]), (metric, list(rows["value"]))
    return frame


def trial_labels(ctx: RunContext, metric: str) -> list[dict]:
    """The labels of ``metric``'s rows, in trial order."""
    frame = ctx.measurements_frame("run")
    rows = frame[frame["metric"] == metric].sort_values("trial")
    return [json.loads(labels) for labels in rows["labels"]]


def arm_requests(ctx: RunContext, trial: int, mode: str) -> pd.DataFrame:
    """The requests one arm of one trial served, in arrival order."""
    requests = ctx.frames()["requests"]
    rows = requests[(requests["trial"] == trial) & (requests["mode"] == mode)]
    return rows.sort_values(["arrival_s", "request_id"]).reset_index(drop=True)


def modes_in_order(ctx: RunContext, trial: int) -> list[str]:
    """The arms of ``trial`` in the order they were served (saved)."""
    requests = ctx.frames()["requests"]
    return list(dict.fromkeys(requests.loc[requests["trial"] == trial, "mode"]))


def _trial_rates(frame: pd.DataFrame, trial: int) -> dict[str, float] | None:
    """The paced and measured saturation of ``trial`` from any of its rows' labels."""
    for text in frame.loc[frame["trial"] == trial, "labels"]:
        labels = json.loads(text)
        if "paced_tok_s" in labels:
            return {k: labels[k] for k in ("paced_tok_s", "saturation_tok_s")}
    return None


def assert_realised_loads(ctx: RunContext, target: float) -> None:
    """Every trial recorded one realised load against ``target``, and carries the off-target
    flag exactly when that load is outside its recorded tolerance (so scoring drops it).

    An episode's work is exact (tenant_runs.phased_requests: within one request's tokens of
    load x the paced rate x its window), so the realised load times the trial's measured
    saturation over the paced one is the target within 20% (one request of a tiny episode;
    a unit slip, requests for output tokens or one sequence's rate for the batch's, moves it
    4x or more). The realised load itself is not held: two bursts of 1 ms steps on a busy
    host can read 3x apart, which is the host, and whether the trial ran the design is what
    the off-target flag records."""
    frame = ctx.measurements_frame("run")
    realised = frame[frame["metric"] == evidence_rules.REALISED_LOAD].sort_values("trial")
    assert realised["trial"].tolist() == list(range(ctx.trials))
    off = set(frame.loc[frame["metric"] == evidence_rules.OFF_TARGET, "trial"])
    rows = zip(realised["trial"], realised["value"], realised["labels"], strict=True)
    for trial, value, text in rows:
        labels = json.loads(text)
        assert labels["target"] == pytest.approx(target)
        rates = _trial_rates(frame, trial)
        assert rates is not None, f"trial {trial} labels no paced_tok_s and saturation_tok_s"
        over_pace = value * rates["saturation_tok_s"] / rates["paced_tok_s"]
        assert over_pace == pytest.approx(target, rel=0.2), (trial, value, rates)
        hit = evidence_rules.on_target(value, target, labels["tolerance"])
        assert (trial in off) == (not hit), (trial, value, labels)
