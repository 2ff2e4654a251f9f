"""`claimbench run` on a tmp --root project with fake experiments (no engine)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from test_cli_claims import assert_one_line_error, invoke


def run_dirs(results_dir):
    runs = results_dir / "runs"
    return sorted(p for p in runs.iterdir()) if runs.is_dir() else []


def test_run_one_claim(project):
    result = invoke("--root", str(project), "run", "--claim", "fake-pass", "--seed", "5")
    assert result.exit_code == 0, result.output
    (run_dir,) = run_dirs(project / "results")
    assert run_dir.name.split("-", 1)[1].startswith("fake-pass-")
    assert "1 run(s) stored, 0 failed" in result.stdout
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["model"] is None and meta["origin"] and len(meta["prediction_hash"]) == 16
    assert (meta["claim"], meta["profile"], meta["seed"], meta["trials"]) == (
        "fake-pass",
        "quick",
        5,
        3,
    )
    measurements = pd.read_parquet(run_dir / "measurements.parquet")
    score = measurements[measurements["metric"] == "score"]
    assert score["value"].tolist() == pytest.approx([2.0, 2.01, 2.02])
    assert score["evidence"].unique().tolist() == ["cpu"]
    assert score["unit"].unique().tolist() == ["x"]
    analytic = measurements[measurements["metric"] == "bytes_moved"]
    assert analytic["evidence"].unique().tolist() == ["analytic"]
    assert json.loads(analytic["labels"].iloc[0]) == {"kind": "model"}
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert requests["mode"].tolist() == ["fcfs", "fcfs", "vtc", "vtc"]
    steps = pd.read_parquet(run_dir / "steps.parquet")
    assert steps["mode"].tolist() == ["fcfs", "fcfs"]


def test_run_options(project, tmp_path):
    store = tmp_path / "elsewhere"
    result = invoke(
        "--root",
        str(project),
        "run",
        "--claim",
        "fake-pass",
        "--claim",
        "fake-fail",
        "--claim",
        "fake-pass",  # repeated ids run once
        "--profile",
        "full",
        "--trials",
        "5",
        "--results-dir",
        str(store),
    )
    assert result.exit_code == 0, result.output
    assert not (project / "results").exists()
    metas = [json.loads((d / "meta.json").read_text()) for d in run_dirs(store)]
    assert sorted(m["claim"] for m in metas) == ["fake-fail", "fake-pass"]
    assert {m["trials"] for m in metas} == {5}
    assert {m["profile"] for m in metas} == {"full"}


@pytest.mark.slow
def test_run_all_skips_unwritten_and_reports_failures(project):
    result = invoke("--root", str(project), "run", "--all")
    assert result.exit_code == 1, result.output
    assert "skipping fake-unwritten: no experiment yet" in result.stdout
    assert "fake-broken failed, not stored: RuntimeError: the fake engine fell over" in (
        result.stdout
    )
    assert "second line" not in result.output
    assert "Traceback" not in result.output
    assert "3 run(s) stored, 1 failed" in result.stdout
    claims = sorted(
        json.loads((d / "meta.json").read_text())["claim"] for d in run_dirs(project / "results")
    )
    assert claims == ["fake-fail", "fake-pass", "fake-tpu"]


def test_ctrl_c_keeps_earlier_runs_and_leaves_no_partial_run(interrupting_project):
    root = interrupting_project
    result = invoke("--root", str(root), "run", "--claim", "fake-pass", "--claim", "fake-broken")
    assert result.exit_code == 130, result.output
    assert "interrupted during fake-broken" in result.stdout
    (kept,) = run_dirs(root / "results")
    assert "fake-pass" in kept.name
    assert not any(p.name.startswith(".tmp-") for p in (root / "results" / "runs").iterdir())


@pytest.mark.slow
def test_runs_are_append_only(project):
    for _ in range(2):
        assert invoke("--root", str(project), "run", "--claim", "fake-pass").exit_code == 0
    first, second = run_dirs(project / "results")
    assert first.name != second.name


def test_experiment_file_that_fails_to_import_is_a_failed_run(project):
    (project / "experiments" / "broken.py").write_text("import not_a_module_anywhere\n")
    result = invoke("--root", str(project), "run", "--claim", "fake-broken")
    assert result.exit_code == 1
    assert "ModuleNotFoundError" in result.stdout
    assert run_dirs(project / "results") == []


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([], "name the claims to run with --claim ID"),
        (["--all", "--claim", "fake-pass"], "either --claim ID ... or --all"),
        (["--claim", "nope"], "no claim 'nope'"),
        (["--claim", "fake-unwritten"], "claim 'fake-unwritten': no experiment yet"),
        (["--claim", "fake-pass", "--profile", "huge"], "'huge' is not one of 'quick', 'full'"),
        (["--claim", "fake-pass", "--trials", "many"], "Invalid value for '--trials'"),
        (["--claim", "fake-pass", "--fast"], "No such option: --fast"),
        (["--claim", "fake-pass", "--trials", "0"], "--trials must be >= 1, got 0"),
        (["--claim", "fake-pass", "--max-trials", "9"], "go with --until-decided"),
        (
            ["--claim", "fake-pass", "--until-decided", "--trials", "5", "--max-trials", "4"],
            "--until-decided: max_trials must be >= block_trials (5), got 4",
        ),
        (
            ["--claim", "fake-pass", "--until-decided", "--max-minutes", "nan"],
            "--until-decided: max_minutes must be a positive number",
        ),
    ],
)
def test_bad_input_exits_2_and_runs_nothing(project, args, fragment):
    assert_one_line_error(invoke("--root", str(project), "run", *args), fragment)
    assert run_dirs(project / "results") == []


@pytest.mark.parametrize(
    "name", ["CLAIMBENCH_NATIVE", "CLAIMBENCH_NATIVE_PREFILL", "CLAIMBENCH_NATIVE_DECODE"]
)
def test_a_kernel_override_in_the_environment_runs_nothing(project, monkeypatch, name):
    """A run under a kernel swap would pool with the default kernels' runs: refused."""
    monkeypatch.setenv(name, "0")
    result = invoke("--root", str(project), "run", "--claim", "fake-pass")
    assert_one_line_error(result, f"{name} set: claims are measured on the default kernels")
    assert run_dirs(project / "results") == []


def test_until_decided_runs_blocks_until_the_condition_is_decided(project):
    result = invoke(
        "--root", str(project), "run", "--claim", "fake-pass", "--until-decided", "--trials", "3"
    )
    assert result.exit_code == 0, result.output
    (run_dir,) = run_dirs(project / "results")
    meta = json.loads((run_dir / "meta.json").read_text())
    # Three trials cannot exclude anything at 0.95; six of a steady score >= 1 do.
    assert meta["stopping"]["reason"] == "decided"
    assert meta["trials"] == meta["stopping"]["num_trials"] == 6
    measurements = pd.read_parquet(run_dir / "measurements.parquet")
    score = measurements[measurements["metric"] == "score"]
    assert sorted(score["trial"]) == list(range(6))


def test_missing_model_dir(project, tmp_path):
    assert_one_line_error(
        invoke("--root", str(project), "--model", str(tmp_path / "nope"), "run", "--all"),
        "is not a directory",
    )


def test_broken_model_is_rejected_once_before_any_experiment(project, tmp_path):
    # fake-pass never loads a model: before the check it ran and stored a run naming the path.
    empty = tmp_path / "empty-model"
    empty.mkdir()
    result = invoke("--root", str(project), "--model", str(empty), "run", "--all")
    assert_one_line_error(result, f"--model: {empty} has no config.json")
    assert "stored" not in result.output and "skipping" not in result.output
    assert not (project / "results").exists()


def test_bad_global_dtype(project):
    assert_one_line_error(
        invoke("--root", str(project), "--dtype", "fp7", "run", "--claim", "fake-pass"),
        "Invalid value for '--dtype': 'fp7' is not one of 'bfloat16', 'float32'",
    )
