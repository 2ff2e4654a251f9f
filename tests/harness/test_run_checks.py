"""Which runs may be scored: today's prediction and design, a committed tree, a speculative run's
draft hashes. Each failing run is listed with its reason and never decides a verdict."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from scoring_helpers import claim, design_hash, rows, store_run, write_experiment

from claimbench.harness import results, run_checks, scoring

GOOD = rows("gain", [2.0, 2.1, 2.2])
BAD = rows("gain", [1.0, 1.1, 1.2])


def test_a_run_of_an_earlier_design_is_listed_not_scored(tmp_path):
    c = claim()
    root = tmp_path / "proj"
    write_experiment(root, c, "def run(ctx):\n    ctx.record('gain', 1.0, trial=0)\n")
    store = tmp_path / "results"
    old = store_run(store, c, BAD, hour=9, root=root)
    # The experiment changes: the run above measured a design that no longer exists.
    write_experiment(root, c, "def run(ctx):\n    ctx.record('gain', 2.0, trial=0)\n")
    designs = run_checks.today_designs(root, [c])
    alone = scoring.score_claim(c, [old], designs)
    assert (alone.verdict, alone.exclusion_counts()) == ("not-run", {run_checks.EARLIER_DESIGN: 1})
    new = store_run(store, c, GOOD, hour=10, root=root)
    score = scoring.score_claim(c, [old, new], designs)
    assert (score.verdict, score.headline.run_id) == ("confirmed", new.run_id)
    # A run without a design hash (stored before they were recorded) is of an unknown design.
    legacy = store_run(store, c, GOOD, hour=11)
    assert scoring.score_claim(c, [legacy], designs).verdict == "not-run"
    # Without today's designs (no experiments at hand) the check is not made.
    assert scoring.score_claim(c, [old]).verdict == "refuted"
    assert design_hash(root, c) == designs[c.id]
    # An experiment that does not parse has no design today: nothing of it is scored, no crash.
    write_experiment(root, c, "def run(ctx:\n")
    assert run_checks.today_designs(root, [c]) == {}


def test_a_run_from_a_dirty_tree_is_listed_not_scored(tmp_path):
    c = claim()
    dirty = store_run(
        tmp_path, c, GOOD, hour=10, extra_meta={"git": {"sha": "a" * 40, "dirty": True}}
    )
    clean = store_run(
        tmp_path, c, BAD, hour=9, extra_meta={"git": {"sha": "b" * 40, "dirty": False}}
    )
    score = scoring.score_claim(c, [dirty, clean])
    # The newer run is dirty: the verdict comes from the older clean one.
    assert (score.verdict, score.headline.run_id) == ("refuted", clean.run_id)
    (group,) = score.groups
    assert [r.exclusion for r in group.runs] == [run_checks.DIRTY_TREE, None]
    # An exported tree cannot know (dirty None): its commit is recorded, so it passes.
    exported = {"git": {"sha": "c" * 40, "dirty": None, "exported": True}}
    assert (
        scoring.score_claim(c, [store_run(tmp_path, c, GOOD, hour=11, extra_meta=exported)]).verdict
        == "confirmed"
    )


def test_a_speculative_run_without_its_draft_hash_is_not_scored(tmp_path):
    c = claim()
    size = {"architecture": {"num_params": 1000}}
    target = {"name": "t", "path": "/m/t", "weights_sha256": {"model.safetensors": "1" * 64}}
    draft = {"name": "d", "path": "/m/d", "weights_sha256": {"model.safetensors": "2" * 64}}
    target, draft = target | size, draft | size
    configs = [{"speculative": "none"}, {"speculative": "draft", "draft_model_path": None}]
    lacking = {"engine_configs": configs, "model": target, "other_models": []}
    run = store_run(tmp_path / "a", c, GOOD, extra_meta=lacking)
    score = scoring.score_claim(c, [run])
    assert (score.verdict, score.exclusion_counts()) == (
        "not-run",
        {run_checks.MISSING_DRAFT_HASH: 1},
    )
    hashed = lacking | {"other_models": [draft]}
    assert (
        scoring.score_claim(c, [store_run(tmp_path / "b", c, GOOD, extra_meta=hashed)]).verdict
        == "confirmed"
    )
    # A pinned draft must be the very directory hashed.
    pinned = hashed | {"engine_configs": [{"speculative": "draft", "draft_model_path": "/m/other"}]}
    assert run_checks.lacks_draft_hash(pinned)
    assert not run_checks.lacks_draft_hash(
        pinned | {"engine_configs": [{"speculative": "draft", "draft_model_path": "/m/d"}]}
    )
    # No speculative engine: nothing to hash.
    assert not run_checks.lacks_draft_hash({"engine_configs": [{"speculative": "none"}]})


@pytest.mark.slow
def test_every_scorer_checks_the_design(tmp_path):
    """The CLI, the site and the MCP runbook score with today's designs: a run of an earlier
    design is not scored by any of them."""
    from claimbench.ops.jobs import JobManager
    from claimbench.ops.runbook import OpsConfig, Runbook

    c = claim(id="fake-pass")
    root = tmp_path / "proj"
    root.mkdir()
    (root / "claims.yaml").write_text(
        "- id: fake-pass\n  part: 1\n  title: t\n  statement: s\n  confidence: 0.8\n"
        "  scope: any\n  prediction:\n    - {metric: gain, op: '>=', value: 1.5}\n"
        "  refuted_if: r\n"
    )
    write_experiment(root, c, "def run(ctx):\n    pass\n")
    store_run(root / "results", c, GOOD, root=root)
    runbook = Runbook(OpsConfig(root, None, "float32", None), JobManager())
    assert runbook.get_scores().totals["confirmed"] == 1
    write_experiment(root, c, "def run(ctx):\n    return None\n")  # the design moved on
    assert runbook.get_scores().totals["not-run"] == 1
    assert runbook.show_claim("fake-pass").status == "not run"


def _without(meta: dict, path: tuple[str, ...]) -> dict:
    """A deep copy of ``meta`` with the key at ``path`` deleted."""
    copy = json.loads(json.dumps(meta))
    node = copy
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return copy


def _with(meta: dict, path: tuple[str, ...], value: object) -> dict:
    copy = json.loads(json.dumps(meta))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return copy


MODEL = {
    "name": "t",
    "path": "/m/t",
    "architecture": {"num_params": 4_400_000},
    "weights_sha256": {"model.safetensors": "1" * 64},
}


@pytest.mark.parametrize(
    ("change", "missing"),
    [
        (lambda m: _without(m, ("git",)), "git commit"),
        (lambda m: _without(m, ("git", "sha")), "git commit"),
        (lambda m: _with(m, ("git",), "a" * 40), "git commit"),
        (lambda m: _with(m, ("git", "sha"), 12345), "git commit"),
        (lambda m: _with(m, ("git", "dirty"), "no"), "git dirty flag"),
        (lambda m: _without(m, ("design_hash",)), "design hash"),
        (lambda m: _with(m, ("design_hash",), ["0" * 16]), "design hash"),
        (lambda m: _without(m, ("prediction_hash",)), "prediction hash"),
        (lambda m: _with(m, ("profile",), None), "profile"),
        (lambda m: _with(m, ("hardware",), "cpu"), "hardware class"),
        (lambda m: _with(m, ("hardware", "platform"), "quantum"), "hardware class"),
        (lambda m: _with(m, ("hardware", "platform"), "gpu"), "hardware class (gpu run"),
        (lambda m: _without(m, ("model", "weights_sha256")), "model weight hashes"),
        (lambda m: _with(m, ("model", "weights_sha256"), {"w": "zz"}), "model weight hashes"),
        (lambda m: _with(m, ("model", "architecture", "num_params"), "4M"), "parameter count"),
        (lambda m: _with(m, ("model",), "/m/t"), "model record"),
        (lambda m: _with(m, ("model", "path"), 7) | {"model": {"path": [7]}}, "model weight"),
        (lambda m: _with(m, ("other_models",), [None]), "other model 0 record"),
        (lambda m: _without(m, ("model",)), "model record"),
        (lambda m: _with(m, ("trials",), 2), "trials 2 outside the run's 2"),
        (lambda m: _with(m, ("trials",), "5"), "trial count"),
        # Unknown dirtiness passes only for an exported tree, which records that it is one.
        (lambda m: _with(m, ("git", "dirty"), None), "git dirty flag"),
        (lambda m: _without(m, ("git", "dirty")), "git dirty flag"),
        (lambda m: _with(m, ("hardware", "device_kind"), "TPU v5 lite"), "cpu run on a TPU"),
        (
            lambda m: _with(m, ("model",), None) | {"engine_configs": [{"model_path": "/m/t"}]},
            "model record",
        ),
        (lambda m: _without(m, ("model", "architecture", "num_params")), "parameter count"),
        (lambda m: _with(m, ("end",), "yesterday"), "run times"),
        # Params edited under today's prediction hash: not the params that hash names.
        (lambda m: _with(m, ("params",), {"load": 0.05}), "params"),
    ],
)
def test_a_run_with_provenance_deleted_or_garbled_is_listed_not_scored(tmp_path, change, missing):
    c = claim()
    root = tmp_path / "proj"
    write_experiment(root, c)
    designs = run_checks.today_designs(root, [c])
    good = store_run(tmp_path / "a", c, BAD, root=root, extra_meta={"model": MODEL})
    assert scoring.score_claim(c, [good], designs).verdict == "refuted"
    # The same run copied with one provenance field deleted or replaced by the wrong type.
    meta = change(good.meta)
    (tmp_path / "b" / "runs").mkdir(parents=True)
    copy = shutil.copytree(good.path, tmp_path / "b" / "runs" / good.run_id)
    (copy / "meta.json").write_text(json.dumps(meta))
    (run,) = results.read_runs(tmp_path / "b")[0]
    score = scoring.score_claim(c, [run], designs)
    assert score.verdict == "not-run" and score.headline is None
    ((reason, count),) = score.exclusion_counts().items()
    assert reason.startswith(run_checks.MISSING_PROVENANCE) and missing in reason and count == 1
    # Without today's designs the record is still required.
    assert scoring.score_claim(c, [run]).verdict == "not-run"


@pytest.mark.parametrize(
    ("extra", "missing"),
    [
        # Rows appended under trial numbers the run never ran narrow the interval on nothing.
        ([("m", 100 + t, 4.0, "cpu") for t in range(5)], "trials 100, 101, 102, ..."),
        ([("m", 2, float("inf"), "cpu")], "non-finite values of m"),
        ([("m", 1, float("-inf"), "cpu")], "non-finite values of m"),
        ([("realised_load", 0, 1.0, "cpu", "{not json")], "unreadable labels of realised_load"),
        # A trial's realised load recorded, the others' deleted: each trial must show its load.
        (
            [("realised_load", 0, 1.0, "cpu", '{"target": 1.0, "tolerance": 0.25}')],
            "realised load of trials 1, 2",
        ),
    ],
)
def test_measurements_the_meta_does_not_vouch_for_are_listed_not_scored(tmp_path, extra, missing):
    c = claim()
    root = tmp_path / "proj"
    write_experiment(root, c)
    designs = run_checks.today_designs(root, [c])
    good = store_run(tmp_path / "a", c, BAD, root=root, extra_meta={"model": MODEL})
    assert scoring.score_claim(c, [good], designs).verdict == "refuted"
    (tmp_path / "b" / "runs").mkdir(parents=True)
    copy = shutil.copytree(good.path, tmp_path / "b" / "runs" / good.run_id)
    measurements = results.read_runs(tmp_path / "b")[0][0].measurements
    added = pd.DataFrame(
        [
            {"run_id": good.run_id, "claim_id": c.id, "trial": t, "metric": m, "value": v,
             "unit": "", "evidence": e, "labels": rest[0] if rest else "{}"}
            for m, t, v, e, *rest in extra
        ]
    )  # fmt: skip
    pd.concat([measurements, added]).to_parquet(copy / "measurements.parquet", index=False)
    (run,) = results.read_runs(tmp_path / "b")[0]
    score = scoring.score_claim(c, [run], designs)
    assert score.verdict == "not-run"
    ((reason, count),) = score.exclusion_counts().items()
    assert reason.startswith(run_checks.MISSING_PROVENANCE) and missing in reason, reason
