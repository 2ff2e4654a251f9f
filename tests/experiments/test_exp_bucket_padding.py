"""bucket-padding: bucket policies re-padding served steps, and the experiment at a tiny size."""

from __future__ import annotations

import json
from itertools import combinations

import numpy as np
import pytest
from engine_helpers import shared_tiny_engine
from tenant_exp_helpers import experiment, run_tiny, write_checkpoint

from claimbench.engine.sampling_params import SamplingParams
from claimbench.engine.worker.buckets import bucket_pairs, power_of_two_buckets
from claimbench.lab.metrics.bucket_policies import (
    BucketPolicy,
    fit_histogram_buckets,
    geometric_buckets,
)

CLAIM = "bucket-padding"


def _padded_total(buckets: tuple[int, ...], needed: np.ndarray) -> int:
    return int(np.asarray(buckets)[np.searchsorted(buckets, needed)].sum())


def test_histogram_fit_is_the_least_padding_bucket_set():
    rng = np.random.default_rng(0)
    for _ in range(20):
        needed = rng.integers(1, 65, size=int(rng.integers(5, 30)))
        for k in (1, 2, 3, 4):
            fitted = fit_histogram_buckets(needed, k, 64)
            assert len(fitted) <= k and fitted[-1] == 64
            # Brute force: every set of k - 1 sizes from the trace, plus the budget.
            sizes = sorted(set(needed.tolist()) - {64})
            best = min(
                _padded_total((*c, 64), needed) for r in range(k) for c in combinations(sizes, r)
            )
            assert _padded_total(fitted, needed) == best


def test_histogram_never_pads_more_than_powers_of_two_with_as_many_buckets():
    # A decode-heavy trace: mostly a few tokens, some full prefill steps.
    rng = np.random.default_rng(1)
    num_tokens = np.concatenate([rng.integers(1, 9, 400), rng.integers(100, 513, 40)])
    num_seqs = np.minimum(num_tokens, 8)
    seqs = power_of_two_buckets(8, 32)
    pow2 = BucketPolicy("pow2", power_of_two_buckets(16, 512), seqs)
    needed = pow2.needed_tokens(num_tokens, num_seqs)
    fitted = BucketPolicy("hist", fit_histogram_buckets(needed, len(pow2.token_buckets), 512), seqs)
    assert fitted.padding_pct(num_tokens, num_seqs) <= pow2.padding_pct(num_tokens, num_seqs)
    # One bucket (the budget) pads every small step to 512: far worse.
    one = BucketPolicy("one", (512,), seqs)
    assert one.padding_pct(num_tokens, num_seqs) > pow2.padding_pct(num_tokens, num_seqs)


def test_geometric_ratio_two_is_the_engines_powers_of_two():
    assert geometric_buckets(16, 512, 2.0) == power_of_two_buckets(16, 512)
    assert geometric_buckets(16, 500, 4.0) == (16, 64, 256, 500)
    assert geometric_buckets(16, 64, 1.5) == (16, 24, 36, 54, 64)


@pytest.mark.slow
def test_engine_policy_reproduces_the_served_steps_buckets():
    # Tiny engine: token buckets (16, 32), seq buckets (8,); prompts chunk over several steps.
    engine = shared_tiny_engine()
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 97, int(n)).tolist() for n in (5, 40, 12, 70, 3, 9)]
    engine.generate(prompts, SamplingParams(max_tokens=6, ignore_eos=True))
    steps = engine.steps_frame()
    policy = experiment(CLAIM).engine_policy(engine.config)
    n, s = steps["num_scheduled_tokens"].to_numpy(), steps["num_seqs"].to_numpy()
    assert (policy.padded_tokens(n, s) == steps["token_bucket"].to_numpy()).all()
    # Padding counted is the bucket less the scheduled tokens, step by step.
    assert (steps["num_padding_tokens"] == steps["token_bucket"] - n).all()
    assert experiment(CLAIM).measured_padding_pct(steps) == pytest.approx(policy.padding_pct(n, s))
    assert policy.num_programs == len(bucket_pairs(engine.config))


TINY = {
    "engine": {
        "dtype": "float32",
        "page_size": 8,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 32,
        "max_model_len": 128,
    },
    "compile_cache": False,
    "prompt_len": [4, 40],
    "output_mean": 8.0,
    "output_max": 16,
    "episode_requests": 12,
    "saturation_requests": 12,
    "ratios": [1.5, 2.0],
    "histogram_buckets": [1, 2],
}


def _labelled(frame, metric):
    rows = frame[frame["metric"] == metric]
    return [
        (t, json.loads(x), v)
        for t, x, v in zip(rows["trial"], rows["labels"], rows["value"], strict=True)
    ]


@pytest.mark.slow
def test_tiny_run_serves_every_policy_at_its_own_buckets(tmp_path):
    ctx = run_tiny(CLAIM, write_checkpoint(tmp_path / "ckpt"), trials=2, base=TINY)
    exp = experiment(CLAIM)
    frame = ctx.measurements_frame("run")
    analytic = frame[frame["evidence"] == "analytic"]
    # Buckets (16, 32) x (4,): two programs, recorded once with their inputs.
    assert list(analytic["metric"]) == ["num_programs"] and list(analytic["value"]) == [2.0]
    assert json.loads(analytic["labels"].iloc[0])["inputs"]["token_buckets"] == [16, 32]
    measured = frame[frame["evidence"] == "cpu"]
    padding = measured[measured["metric"] == "padding_waste_pct"].sort_values("trial")
    assert list(padding["trial"]) == [0, 1]
    assert ((padding["value"] >= 0) & (padding["value"] < 100)).all()
    compiles = measured[measured["metric"] == "compiles_while_serving"]
    assert (compiles["value"] == 0).all()  # every bucket was compiled ahead
    steps = ctx.frames()["steps"]
    curve = _labelled(measured, "policy_padding_pct")
    names = ["engine (powers of two)", "geometric x1.5", "geometric x2", "histogram 1"]
    assert sorted({x["policy"] for _, x, _ in curve}) == sorted([*names, "histogram 2"])
    fitted = {}
    for trial, labels, value in curve:
        buckets = tuple(labels["token_buckets"])
        policy = BucketPolicy(labels["policy"], buckets, (4,))
        # Each policy's engine compiled one program per pair ahead and none while serving.
        assert labels["programs"] == policy.num_programs and labels["compiles_while_serving"] == 0
        # Served for real: every step ran at the smallest of the policy's buckets it fits
        # (x2 is the engine's own buckets, whose serving it shares).
        name = "engine (powers of two)" if buckets == (16, 32) else labels["policy"]
        served = steps[(steps["trial"] == trial) & (steps["policy"] == name)]
        n, s = served["num_scheduled_tokens"].to_numpy(), served["num_seqs"].to_numpy()
        assert len(served) and (policy.padded_tokens(n, s) == served["token_bucket"]).all()
        assert 0 <= value < 100
        if buckets == (16, 32):
            assert value == pytest.approx(padding["value"].iloc[trial])
        if labels["policy"].startswith("histogram"):
            fitted.setdefault(labels["policy"], set()).add(buckets)
    by_name = {x["policy"]: tuple(x["token_buckets"]) for _, x, _ in curve}
    assert by_name["geometric x1.5"] == (16, 24, 32)
    # One histogram bucket is the budget; two are fitted to the first trial's engine steps
    # (arrival window) and held for the second trial.
    assert fitted["histogram 1"] == {(32,)}
    [two] = fitted["histogram 2"]
    first = steps[(steps["trial"] == 0) & (steps["policy"] == "engine (powers of two)")]
    requests = ctx.frames()["requests"]
    arrivals = requests[(requests["trial"] == 0) & (requests["policy"] == "engine (powers of two)")]
    window = first[
        (first["start_s"] >= arrivals["arrival_s"].min())
        & (first["start_s"] <= arrivals["arrival_s"].max())
    ]
    pow2 = BucketPolicy("pow2", (16, 32), (4,))
    needed = pow2.needed_tokens(window["num_scheduled_tokens"], window["num_seqs"])
    assert two == fit_histogram_buckets(needed, 2, 32)
    figures = exp.figures
    assert figures([tmp_path / "no-run"]) == []
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    frame.to_parquet(run_dir / "measurements.parquet")
    [(title, svg)] = figures([run_dir])
    assert "programs" in title and svg.startswith("<svg") and "http://" not in svg.split(">", 1)[1]
