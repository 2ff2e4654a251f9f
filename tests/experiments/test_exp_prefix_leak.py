"""The prefix-leak experiment at tiny size: the calibration's threshold rule, then a run of both
modes in which tenants share a system prompt, with every cache hit counted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from engine_helpers import tiny_engine, tiny_model

from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import RunContext
from claimbench.harness.registry import load_experiment

ROOT = Path(__file__).resolve().parents[2]
METRICS = ("shared_attack_acc_pct", "salted_attack_acc_pct", "salted_own_hit_retention_pct")
SYSTEM, DOCUMENT = 16, 32  # 2 and 4 pages of 8
TINY = {
    "system_prompt_len": SYSTEM,
    "prefix_len": {"kind": "fixed", "value": DOCUMENT},
    "suffix_len": {"kind": "fixed", "value": 4},
    "num_tenants": 2,
    "num_secrets": 4,
    "victim_rounds_before": 1,
    "victim_rounds_after": 1,
    "num_calibration": 4,
    "num_probes": 4,
}


class TinyContext(RunContext):
    """Serves with the tiny random model instead of loading one from disk."""

    def engine(self, *, precompile=False, compile_cache=False, **overrides):
        engine = tiny_engine(tiny_model(), num_pages=128, **overrides)
        if precompile:
            engine.precompile()
        return engine


def _experiment():
    return load_experiment(ROOT, find_claim(load_claims(ROOT), "prefix-leak"))


def _ctx(params: dict, trials: int = 2) -> TinyContext:
    return TinyContext(
        claim_id="prefix-leak",
        profile="quick",
        params=params,
        trials=trials,
        seed=0,
        hardware={"platform": "cpu"},
        dtype="float32",
    )


def test_best_threshold_separates_hits_from_misses():
    best = _experiment().best_threshold
    ttft = np.array([0.01, 0.02, 0.05, 0.06])
    # Halfway in log time between 0.02 and 0.05: sqrt(0.02 * 0.05).
    assert best(ttft, np.array([True, True, False, False])) == pytest.approx(0.0316, abs=1e-4)
    # Overlap: 3 of 4 right at sqrt(0.01 * 0.02) or sqrt(0.05 * 0.06); the lower one wins.
    assert best(ttft, np.array([True, False, True, False])) == pytest.approx(0.0141, abs=1e-4)
    with pytest.raises(ValueError, match="needs hits and misses"):
        best(ttft, np.array([True] * 4))


def test_calibration_puts_the_threshold_between_the_hit_and_miss_clusters():
    best = _experiment().best_threshold
    rng = np.random.default_rng(0)
    for _ in range(20):
        # Hits near 4 ms, misses near 12 ms, 20% multiplicative jitter, in random order.
        hits = 4e-3 * rng.lognormal(0, 0.2, size=8)
        misses = 12e-3 * rng.lognormal(0, 0.2, size=8)
        order = rng.permutation(16)
        ttft, labels = np.concatenate([hits, misses])[order], (order < 8)
        threshold = best(ttft, labels)
        if hits.max() < misses.min():
            assert hits.max() < threshold < misses.min()
        assert np.median(hits) < threshold < np.median(misses)
    # One stalled hit (a busy machine) does not drag the cut into the miss cluster.
    ttft = np.array([4e-3, 5e-3, 4.5e-3, 50e-3, 12e-3, 13e-3, 11e-3, 14e-3])
    labels = np.array([True] * 4 + [False] * 4)
    assert 5e-3 < best(ttft, labels) < 11e-3


@pytest.mark.slow
def test_tiny_run_shares_the_system_prompt_only_when_shared():
    ctx = _ctx(TINY)
    _experiment().run(ctx)
    frame = ctx.measurements_frame("run")
    for metric in METRICS:
        assert list(frame.loc[frame["metric"] == metric, "trial"]) == [0, 1]
    # The counts behind each attack's accuracy (probes classified right, probes), so scoring
    # pools them: they give back the recorded share.
    for mode in ("shared", "salted"):
        share, right, total = (
            frame.loc[frame["metric"] == f"{mode}_attack_acc_pct{suffix}", "value"].to_numpy()
            for suffix in ("", "_successes", "_total")
        )
        assert len(share) == 2 and (total == TINY["num_probes"]).all()
        np.testing.assert_allclose(100 * right / total, share)
    requests = ctx.frames()["requests"]
    hits = requests["prefix_hit_tokens"]

    # Victims, first round (all served together): shared, every request after the very first
    # hits the system prompt, whichever victim computed it; salted, each victim's first
    # request computes its own copy, and its later ones hit it.
    for (mode, _), run in requests[requests["role"] == "victim"].groupby(["mode", "trial"]):
        first_round = run.iloc[: TINY["num_secrets"]]
        firsts = first_round.groupby("tenant").head(1).index
        later = first_round.index.difference(firsts)
        if mode == "shared":
            assert hits[first_round.index[0]] == 0
            assert (hits[first_round.index[1:]] >= SYSTEM).all()
        else:
            assert (hits[firsts] == 0).all()
            assert (hits[later] >= SYSTEM).all()
        # Second round: every victim hits its own system prompt and document in both modes.
        second_round = run.iloc[TINY["num_secrets"] :]
        assert (hits[second_round.index] == SYSTEM + DOCUMENT).all()

    # The attacker: shared, a probe hits the document exactly when a victim sent it; salted,
    # only its own copy of the system prompt, whatever the victims sent.
    probes = requests[requests["role"] == "probe"]
    sent = probes["truth"].astype(bool)
    on_shared = probes["mode"] == "shared"
    expected = np.where(sent & on_shared, SYSTEM + DOCUMENT, SYSTEM)
    assert (probes["prefix_hit_tokens"].to_numpy() == expected).all()
    # Its own primed documents hit in both modes: the labels its calibration learns from.
    calibration = requests[requests["role"] == "calibration"]
    primed = calibration["truth"].astype(bool)
    expected = np.where(primed, SYSTEM + DOCUMENT, SYSTEM)
    assert (calibration["prefix_hit_tokens"].to_numpy() == expected).all()

    # Salting costs each victim but the first one prefill of the system prompt: retention is
    # below 100%, by exactly the hit tokens the victims lost.
    victims = requests[(requests["role"] == "victim") & (requests["trial"] == 0)]
    totals = victims.groupby("mode")["prefix_hit_tokens"].sum()
    retention = frame.loc[frame["metric"] == "salted_own_hit_retention_pct", "value"]
    assert retention.iloc[0] == pytest.approx(100 * totals["salted"] / totals["shared"])
    assert (retention < 100).all() and (retention > 50).all()
    assert (requests["mode"].iloc[0], requests["mode"].iloc[-1]) == ("shared", "shared")


def test_figure(tmp_path):
    ctx = _ctx(TINY, trials=1)
    _experiment().run(ctx)
    ctx.frames()["requests"].to_parquet(tmp_path / "requests.parquet")
    [(title, svg)] = _experiment().figures([tmp_path])
    assert "hits vs misses" in title and svg.startswith("<svg")


@pytest.mark.slow
def test_bad_params():
    with pytest.raises(ValueError, match="num_probes=10 needs 5 secrets, num_secrets=4"):
        _experiment().run(_ctx(TINY | {"num_probes": 10}, trials=1))
    with pytest.raises(ValueError, match=r"unknown param\(s\) \['num_secret'\]"):
        _experiment().run(_ctx(TINY | {"num_secret": 4}, trials=1))
