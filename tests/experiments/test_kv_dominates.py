"""The kv-dominates experiment: analytic KV vs weight bytes, recorded once with its inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import RunContext
from claimbench.harness.registry import load_experiment

ROOT = Path(__file__).resolve().parents[2]

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


def test_records_the_analytic_ratio_once_with_its_inputs():
    ctx = _ctx({})
    _experiment().run(ctx)
    frame = ctx.measurements_frame("run")
    assert set(frame["evidence"]) == {"analytic"}
    # Three trials asked for, yet every arithmetic value is stored once, on trial 0.
    assert frame["trial"].tolist() == [0, 0, 0, 0]
    values = frame.set_index("metric")["value"]
    assert values["kv_bytes_per_token"] == KV_PER_TOKEN
    assert values["kv_bytes"] == 32 * 4096 * KV_PER_TOKEN  # 17.2 GB
    assert values["weight_bytes"] == WEIGHT_BYTES  # 16.1 GB
    assert values["kv_over_weights"] == pytest.approx(32 * 4096 * KV_PER_TOKEN / WEIGHT_BYTES)
    labels = json.loads(frame.set_index("metric").loc["kv_over_weights", "labels"])
    assert labels["model"] == "llama-3.1-8b"
    assert labels["inputs"]["layout"]["num_kv_heads"] == 8
    assert (labels["inputs"]["batch"], labels["inputs"]["context"]) == (32, 4096)
    assert labels["inputs"]["num_params"] == 8_030_261_248


def test_params_override_defaults():
    ctx = _ctx({"context": 2048, "dtype": "int8", "trials": 2}, trials=2)
    _experiment().run(ctx)
    frame = ctx.measurements_frame("run")
    ratio = frame.loc[frame["metric"] == "kv_over_weights", "value"]
    # Half the context and both sides in int8: half the ratio of the default case.
    assert ratio.tolist() == [pytest.approx(2048 * 32 * KV_PER_TOKEN / WEIGHT_BYTES)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"batch": "32"}, "param batch must be an integer"),
        ({"context": 0}, "batch and context must be > 0"),
        ({"dtype": "fp4"}, "kv dtype 'fp4'"),
        ({"model": "gpt-2"}, "unknown model 'gpt-2'"),
        ({"contexts": 4096}, "unknown param"),
    ],
)
def test_bad_params(params, message):
    with pytest.raises(ValueError, match=message):
        _experiment().run(_ctx(params))
