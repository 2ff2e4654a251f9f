"""The kv-dominates experiment: analytic KV vs weight bytes, recorded once per trial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import RunContext
from claimbench.harness.registry import load_experiment

ROOT = Path(__file__).resolve().parents[1]

# Llama-3.1-8B in bf16: 2 (K, V) * 32 layers * 8 kv heads * 128 head_dim * 2 bytes per token.
KV_PER_TOKEN = 2 * 32 * 8 * 128 * 2
WEIGHT_BYTES = 2 * 8_030_261_248


def _experiment():
    claim = find_claim(load_claims(ROOT), "kv-dominates")
    return load_experiment(ROOT, claim)


def _ctx(params: dict, trials: int = 3) -> RunContext:
    return RunContext(
        claim_id="kv-dominates",
        profile="quick",
        params=params,
        trials=trials,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="bfloat16",
    )


def test_records_analytic_ratio_every_trial():
    ctx = _ctx({})
    _experiment().run(ctx)
    frame = ctx.measurements_frame("run")
    assert set(frame["evidence"]) == {"analytic"}
    assert json.loads(frame["labels"].iloc[0]) == {"model": "llama-3.1-8b"}
    by_metric = frame.groupby("metric")
    assert by_metric["trial"].apply(sorted).to_dict() == {
        metric: [0, 1, 2]
        for metric in ("kv_bytes", "kv_bytes_per_token", "kv_over_weights", "weight_bytes")
    }
    values = by_metric["value"].first()
    assert values["kv_bytes_per_token"] == KV_PER_TOKEN
    assert values["kv_bytes"] == 32 * 4096 * KV_PER_TOKEN  # 17.2 GB
    assert values["weight_bytes"] == WEIGHT_BYTES  # 16.1 GB
    assert values["kv_over_weights"] == pytest.approx(32 * 4096 * KV_PER_TOKEN / WEIGHT_BYTES)
    assert values["kv_over_weights"] > 1.0
    # Deterministic: every trial recorded the same value.
    assert by_metric["value"].nunique().max() == 1


def test_params_override_defaults():
    ctx = _ctx({"context": 2048, "dtype": "int8", "trials": 2}, trials=2)
    _experiment().run(ctx)
    frame = ctx.measurements_frame("run")
    ratio = frame.loc[frame["metric"] == "kv_over_weights", "value"]
    # Half the context and both sides in int8: half the ratio of the default case.
    assert len(ratio) == 2
    assert ratio.iloc[0] == pytest.approx(2048 * 32 * KV_PER_TOKEN / WEIGHT_BYTES)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"batch": "32"}, "param batch must be an integer"),
        ({"context": 0}, "batch and context must be > 0"),
        ({"dtype": "fp4"}, "kv dtype 'fp4'"),
        ({"model": "gpt-2"}, "unknown model 'gpt-2'"),
    ],
)
def test_bad_params(params, message):
    with pytest.raises(ValueError, match=message):
        _experiment().run(_ctx(params))
