"""The results store and RunContext: round trips, atomicity, append-only, skipped files."""

from __future__ import annotations

import json
import sys
import types
from datetime import UTC, datetime

import pandas as pd
import pytest

from claimbench.harness import registry, results
from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import RunContext, TrialProgress, run_claim
from claimbench.harness.design import design_of
from claimbench.models.checkpoint import default_draft_path, default_model_path

HARDWARE = {"platform": "cpu", "device_kind": "cpu", "device_count": 1, "price_per_hour": 0.0}


def make_context(trials: int = 3, **kwargs) -> RunContext:
    return RunContext(
        claim_id="kv-int8",
        profile="quick",
        params=kwargs.pop("params", {}),
        trials=trials,
        seed=0,
        hardware=kwargs.pop("hardware", HARDWARE),
        dtype="float32",
        **kwargs,
    )


def minimal_meta(run_id: str) -> dict:
    return {
        "run_id": run_id,
        "claim": "kv-int8",
        "profile": "quick",
        "seed": 0,
        "trials": 1,
        "start": "2026-11-29T10:15:00+00:00",
        "end": "2026-11-29T10:15:01+00:00",
        "hardware": HARDWARE,
        "cost_usd": 0.25,
    }


def test_run_id_sorts_by_time():
    early = results.new_run_id("kv-int8", datetime(2026, 11, 29, 10, 15, 0, tzinfo=UTC))
    late = results.new_run_id("aaa", datetime(2026, 11, 29, 10, 15, 1, tzinfo=UTC))
    assert early.startswith("20261129T101500Z-kv-int8-")
    assert len(early.rsplit("-", 1)[1]) == 4
    assert sorted([late, early]) == [early, late]


def test_record_rows_and_defaults():
    ctx = make_context()
    ctx.record("capacity_ratio", 1.95, trial=0, unit="x")
    ctx.record("capacity_ratio", 2, trial=1, evidence="analytic", mode="int8", batch=4)
    frame = ctx.measurements_frame("run-1")
    assert list(frame.columns) == list(results.MEASUREMENT_COLUMNS)
    assert frame["run_id"].tolist() == ["run-1", "run-1"]
    assert frame["evidence"].tolist() == ["cpu", "analytic"]  # defaults to the run's platform
    assert frame["value"].tolist() == [1.95, 2.0]
    assert json.loads(frame["labels"][1]) == {"batch": 4, "mode": "int8"}
    assert frame["trial"].dtype == "int64"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"trial": 3}, r"trial must be in \[0, 3\), got 3"),
        ({"trial": -1}, r"trial must be in \[0, 3\), got -1"),
        ({"trial": 0, "evidence": "fpga"}, "evidence 'fpga' is not one of"),
    ],
)
def test_record_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_context().record("m", 1.0, **kwargs)


def test_record_rejects_nan_and_empty_metric():
    ctx = make_context()
    with pytest.raises(ValueError, match="value is NaN"):
        ctx.record("m", float("nan"), trial=0)
    with pytest.raises(ValueError, match="non-empty"):
        ctx.record("", 1.0, trial=0)


def test_trials_must_be_positive():
    with pytest.raises(ValueError, match="trials must be >= 1, got 0"):
        make_context(trials=0)


def test_progress_follows_records_and_advance():
    seen = []
    ctx = make_context(trials=4, progress=TrialProgress(4, lambda done, total: seen.append(done)))
    ctx.record("m", 1.0, trial=0)  # trial 0 started: nothing finished yet
    ctx.record("m", 1.0, trial=2)  # trials 0 and 1 are finished
    ctx.progress.advance()
    ctx.progress.advance(10)  # capped at the total
    assert seen == [2, 3, 4]


def test_save_frames_labels_and_stacking():
    ctx = make_context()
    requests = pd.DataFrame({"request_id": ["a"], "ttft_s": [0.5]})
    ctx.save_frames(requests=requests, steps=pd.DataFrame({"step": [0]}), mode="fcfs")
    ctx.save_frames(requests=requests, mode="vtc")
    frames = ctx.frames()
    assert frames["requests"]["mode"].tolist() == ["fcfs", "vtc"]
    assert frames["steps"]["mode"].tolist() == ["fcfs"]
    with pytest.raises(ValueError, match=r"labels \['ttft_s'\] clash"):
        ctx.save_frames(requests=requests, ttft_s=1.0)


def test_engine_builds_from_profile_params(monkeypatch, tmp_path):
    built = {}

    def fake_build(config):
        built["config"] = config

    # A stand-in module: the test is about how the config is assembled, not the engine.
    monkeypatch.setitem(
        sys.modules,
        "claimbench.engine.build",
        types.SimpleNamespace(build_engine=fake_build),
    )
    ctx = make_context(params={"engine": {"max_num_seqs": 4, "page_size": 8}})
    assert ctx.models_used == []
    ctx.engine(page_size=32)
    config = built["config"]
    assert (config.scheduler.max_num_seqs, config.cache.page_size, config.model.dtype) == (
        4,
        32,
        "float32",
    )
    assert config.model.model_path is None  # the shipped default model
    # Provenance: the model the engine loads, and the resolved config (once per engine built).
    assert ctx.models_used == [default_model_path()]
    ctx.engine(model_path=default_draft_path())
    assert ctx.models_used == [default_model_path(), default_draft_path()]
    # A speculative engine's draft is a model the run used as well.
    ctx.engine(speculative="draft", draft_model_path=tmp_path / "draft")
    assert ctx.models_used == [default_model_path(), default_draft_path(), tmp_path / "draft"]
    assert [c["page_size"] for c in ctx.engine_configs] == [32, 8, 8]
    assert ctx.engine_configs[0]["attention_backend_resolved"] in ("cpu", "xla")


def test_write_and_read_round_trip(tmp_path):
    ctx = make_context()
    for trial in range(3):
        ctx.record("capacity_ratio", 1.9 + trial / 100, trial=trial)
    ctx.save_frames(requests=pd.DataFrame({"request_id": ["a"]}), mode="fcfs")
    run_dir = results.write_run(
        tmp_path, minimal_meta("r1"), ctx.measurements_frame("r1"), ctx.frames()
    )
    assert run_dir == tmp_path / "runs" / "r1"
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "measurements.parquet",
        "meta.json",
        "requests.parquet",
        "steps.parquet",
    ]
    runs, skipped = results.read_runs(tmp_path)
    assert skipped == []
    (run,) = runs
    assert run.run_id == "r1" and run.claim_id == "kv-int8"
    assert run.measurements["value"].round(2).tolist() == [1.9, 1.91, 1.92]
    assert run.frame("requests")["mode"].tolist() == ["fcfs"]
    assert run.frame("steps").empty
    assert results.total_cost_usd(runs) == 0.25


def test_runs_are_never_overwritten(tmp_path):
    frame = make_context().measurements_frame("r1")
    results.write_run(tmp_path, minimal_meta("r1"), frame, {})
    with pytest.raises(FileExistsError, match="never overwritten"):
        results.write_run(tmp_path, minimal_meta("r1"), frame, {})


def test_failed_write_leaves_no_run_dir(tmp_path, monkeypatch):
    frame = make_context().measurements_frame("r1")

    def explode(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_parquet", explode)
    with pytest.raises(KeyboardInterrupt):
        results.write_run(tmp_path, minimal_meta("r1"), frame, {})
    assert list((tmp_path / "runs").iterdir()) == []


def test_experiment_that_raises_stores_nothing(project):
    claim = find_claim(load_claims(project), "fake-broken")
    module = registry.load_experiment(project, claim)
    with pytest.raises(RuntimeError, match="fell over"):
        run_claim(
            claim,
            module,
            root=project,
            results_dir=project / "results",
            profile="quick",
            trials=None,
            seed=0,
            dtype="float32",
        )
    assert not (project / "results" / "runs").exists() or not any(
        (project / "results" / "runs").iterdir()
    )


def test_run_claim_meta(project):
    claim = find_claim(load_claims(project), "fake-pass")
    module = registry.load_experiment(project, claim)
    progress = []
    run_dir = run_claim(
        claim,
        module,
        root=project,
        results_dir=project / "results",
        profile="full",
        trials=None,
        seed=7,
        dtype="float32",
        on_progress=lambda done, total: progress.append((done, total)),
    )
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["claim"] == "fake-pass" and meta["profile"] == "full"
    assert meta["trials"] == 4  # the full profile's trials param
    assert meta["seed"] == 7
    assert meta["params"] == {"base": 2.0, "trials": 4}
    assert meta["hardware"]["platform"] == "cpu"
    assert meta["device_s"] == 0.0 and meta["cost_usd"] == 0.0
    assert meta["wall_s"] >= 0.0
    assert meta["git"]["sha"] == "c0ffee" + "0" * 34  # the fake project's commit
    assert {"sha", "dirty"} <= set(meta["git"])
    assert meta["model"] is None  # the fake experiment never loads a model
    assert meta["prediction_hash"] == claim.prediction_hash("full")
    # The design it ran: the experiment's code as scoring reads it today.
    design = design_of(registry.experiment_path(project, claim))
    assert meta["design_hash"] == design.hash and meta["design_modules"] == list(design.modules)
    assert meta["origin"] and meta["engine_configs"] == []
    assert meta["versions"]["jax"] and meta["versions"]["flax"]
    assert progress[0] == (0, 4) and progress[-1] == (4, 4)
    (run,) = results.read_runs(project / "results")[0]
    assert run.measurements.groupby("metric").size().to_dict() == {"bytes_moved": 4, "score": 4}


def test_foreign_and_corrupt_files_are_skipped_not_deleted(tmp_path):
    frame = make_context().measurements_frame("good")
    results.write_run(tmp_path, minimal_meta("good"), frame, {})
    runs_dir = tmp_path / "runs"
    (tmp_path / "notes.txt").write_text("mine")
    (runs_dir / "stray.csv").write_text("a,b\n")
    (runs_dir / ".tmp-20261129T000000Z-x-0000").mkdir()
    (runs_dir / "no-meta").mkdir()
    bad_json = runs_dir / "bad-json"
    bad_json.mkdir()
    (bad_json / "meta.json").write_text("{not json")
    renamed = runs_dir / "renamed"
    results.write_run(tmp_path, minimal_meta("renamed"), frame, {})
    (renamed / "meta.json").write_text(json.dumps(minimal_meta("other")))
    corrupt = runs_dir / "corrupt"
    results.write_run(tmp_path, minimal_meta("corrupt"), frame, {})
    (corrupt / "measurements.parquet").write_bytes(b"PAR1 garbage")

    runs, skipped = results.read_runs(tmp_path)
    assert [r.run_id for r in runs] == ["good"]
    reasons = {item.path.name: item.reason for item in skipped}
    assert reasons == {
        "notes.txt": "not part of the results store",
        "stray.csv": "not a run directory",
        ".tmp-20261129T000000Z-x-0000": "unfinished write of a run (interrupted)",
        "no-meta": "no meta.json",
        "bad-json": reasons["bad-json"],
        "renamed": "meta.json names run 'other', not 'renamed'",
        "corrupt": reasons["corrupt"],
    }
    assert reasons["bad-json"].startswith("meta.json is not valid JSON")
    assert reasons["corrupt"].startswith("measurements.parquet is unreadable")
    for item in skipped:
        assert item.path.exists()  # reported, never deleted


def test_read_runs_of_missing_dir(tmp_path):
    assert results.read_runs(tmp_path / "absent") == ([], [])


def test_old_bench_records_are_named_as_such(tmp_path):
    (tmp_path / "bench" / "20260101-000000").mkdir(parents=True)
    runs, skipped = results.read_runs(tmp_path)
    assert runs == [] and [s.path.name for s in skipped] == ["bench"]
    assert "bench now writes to <root>/bench/" in skipped[0].reason
    assert (tmp_path / "bench" / "20260101-000000").is_dir()  # reported, never touched


def test_realised_load_marks_an_off_target_trial():
    ctx = make_context()
    assert ctx.record_realised_load(0, 2.1, target=2.0, tolerance=0.1)
    assert not ctx.record_realised_load(1, 1.1, target=2.0, tolerance=0.1)
    frame = ctx.measurements_frame("run-1")
    loads = frame[frame["metric"] == "realised_load"]
    assert loads["value"].tolist() == [2.1, 1.1] and set(loads["unit"]) == {"x"}
    assert json.loads(loads["labels"].iloc[0]) == {"target": 2.0, "tolerance": 0.1}
    off = frame[frame["metric"] == "trial_off_target"]
    assert off["trial"].tolist() == [1] and off["value"].tolist() == [1.0]
    with pytest.raises(ValueError, match="realised load must be > 0"):
        ctx.record_realised_load(2, 0.0, target=2.0, tolerance=0.1)
