"""The prefix-leak experiment at tiny size: the threshold rule, then a run of both modes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import tiny_engine, tiny_model

from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import RunContext
from claimbench.harness.registry import load_experiment

ROOT = Path(__file__).resolve().parents[1]
METRICS = ("shared_attack_acc_pct", "salted_attack_acc_pct", "salted_own_hit_retention_pct")
TINY = {
    "prefix_len": 32,  # 4 pages of 8
    "suffix_len": 4,
    "num_secrets": 3,
    "victim_rounds_before": 1,
    "victim_rounds_after": 1,
    "num_calibration": 4,
    "num_probes": 4,
}


class TinyContext(RunContext):
    """Serves with the tiny random model instead of loading one from disk."""

    def engine(self, **overrides):
        return tiny_engine(self.params["model"], num_pages=128, **overrides)


def _experiment():
    return load_experiment(ROOT, find_claim(load_claims(ROOT), "prefix-leak"))


def test_best_threshold_separates_hits_from_misses():
    best = _experiment().best_threshold
    ttft = np.array([0.01, 0.02, 0.05, 0.06])
    # Halfway in log time between 0.02 and 0.05: sqrt(0.02 * 0.05).
    assert best(ttft, np.array([True, True, False, False])) == pytest.approx(0.0316, abs=1e-4)
    # Overlap: 3 of 4 right at sqrt(0.01 * 0.02) or sqrt(0.05 * 0.06); the lower one wins.
    assert best(ttft, np.array([True, False, True, False])) == pytest.approx(0.0141, abs=1e-4)
    with pytest.raises(ValueError, match="needs hits and misses"):
        best(ttft, np.array([True] * 4))


def test_tiny_run_records_every_metric_and_salting_stops_cross_tenant_hits(tmp_path):
    ctx = TinyContext(
        claim_id="prefix-leak",
        profile="quick",
        params=TINY | {"model": tiny_model()},
        trials=2,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="float32",
    )
    _experiment().run(ctx)
    frame = ctx.measurements_frame("run")
    for metric in METRICS:
        values = frame.loc[frame["metric"] == metric].sort_values("trial")
        assert list(values["trial"]) == [0, 1]
        assert all(math.isfinite(v) for v in values["value"])
    requests = ctx.frames()["requests"]
    probes = requests[requests["role"] == "probe"]
    hit = probes["prefix_hit_tokens"] == 32
    sent = probes["truth"].astype(bool)
    shared = probes["mode"] == "shared"
    # Shared: a probe hits exactly when the victim sent its prefix. Salted: never.
    assert (hit[shared] == sent[shared]).all()
    assert not hit[~shared].any()
    # The attacker's own primed prefixes hit in both modes.
    calibration = requests[requests["role"] == "calibration"]
    assert ((calibration["prefix_hit_tokens"] > 0) == calibration["truth"].astype(bool)).all()
    retention = frame.loc[frame["metric"] == "salted_own_hit_retention_pct", "value"]
    assert (retention == 100.0).all()  # the victim's prefixes are its own: salting costs none
    requests.to_parquet(tmp_path / "requests.parquet")
    [(title, svg)] = _experiment().figures([tmp_path])
    assert "hits vs misses" in title and svg.startswith("<svg")


def test_bad_params():
    ctx = TinyContext(
        claim_id="prefix-leak",
        profile="quick",
        params={"num_probes": 10, "num_secrets": 3, "model": None},
        trials=1,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="float32",
    )
    with pytest.raises(ValueError, match="num_probes=10 needs 5 secrets, num_secrets=3"):
        _experiment().run(ctx)
