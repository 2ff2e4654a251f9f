"""An experiment's design hash: which modules it covers, and that it moves with their code."""

from __future__ import annotations

from pathlib import Path

import pytest

from claimbench.harness.design import design_modules, design_of

REPO = Path(__file__).resolve().parents[2]


def write_experiment(root: Path, name: str, text: str) -> Path:
    path = root / "experiments" / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_design_follows_helpers_and_leaves_out_the_system_under_test(tmp_path):
    exp = write_experiment(
        tmp_path,
        "probe",
        "from claimbench.lab import tenant_runs as tr\n"
        "from claimbench.engine.worker.sampler import SamplingParams\n"
        "from experiments.shared_bits import X\n"
        "def run(ctx):\n"
        "    from claimbench.harness.context import RunContext\n"
        "    cmd = ['-m', 'claimbench.lab.cold_start_probe']\n",
    )
    write_experiment(tmp_path, "shared_bits", "from claimbench.lab import quality\nX = 1\n")
    modules = design_modules(exp)
    # Helpers, transitively (tenant_runs -> workload), a helper named as a string, a sibling.
    for name in (
        "experiments.probe",
        "experiments.shared_bits",
        "claimbench.lab.tenant_runs",
        "claimbench.lab.quality",
        "claimbench.lab.cold_start_probe",
        "claimbench.workload.build",
    ):
        assert name in modules, name
    # Engine, the run context and the package's own __init__ are not the design.
    assert not any(m.startswith("claimbench.engine") for m in modules)
    assert "claimbench.harness.context" not in modules
    assert "claimbench.harness" not in modules
    assert not any(m.startswith(("claimbench.harness", "claimbench.ledger")) for m in modules)


def test_design_hash_moves_with_a_helper_and_nothing_else(tmp_path):
    exp = write_experiment(tmp_path, "probe", "from experiments.helper import K\n")
    helper = write_experiment(tmp_path, "helper", "K = 1\n")
    write_experiment(tmp_path, "unrelated", "K = 1\n")
    before = design_of(exp)
    assert before == design_of(exp)  # deterministic
    write_experiment(tmp_path, "unrelated", "K = 2\n")
    assert design_of(exp) == before
    helper.write_text("K = 2\n")
    assert design_of(exp).hash != before.hash


@pytest.mark.slow
def test_every_shipped_experiment_has_a_design():
    for exp in sorted((REPO / "experiments").glob("*.py")):
        design = design_of(exp)
        assert len(design.hash) == 16 and f"experiments.{exp.stem}" in design.modules


@pytest.mark.slow
def test_design_hash_ignores_where_code_lives_and_how_it_is_described(tmp_path):
    def experiment(package: str, doc: str, flag: str = "") -> str:
        return (
            f'"""{doc}"""\nfrom experiments.{package} import helper as h  # {doc}\n'
            f"def run(ctx):\n    cmd = ['-m', 'experiments.{package}.helper'{flag}]\n"
            f"    usage = 'python -m experiments.{package}.helper ARGS'\n"
            "    return h.K, cmd\n"
        )

    write_experiment(tmp_path, "old/helper", '"""A helper."""\nK = 1\n')
    write_experiment(tmp_path, "new/helper", '"""The helper, moved."""\n\nK = 1  # same\n')
    exp = write_experiment(tmp_path, "probe", experiment("old", "Probe."))
    before = design_of(exp)
    assert "experiments.old.helper" in before.modules
    # The same code moved to another package, re-documented and re-commented: the same design.
    write_experiment(tmp_path, "probe", experiment("new", "Probe, reworded."))
    after = design_of(exp)
    assert "experiments.new.helper" in after.modules and after.hash == before.hash
    # A changed statement is a changed design.
    write_experiment(tmp_path, "probe", experiment("new", "Probe.", ", '-v'"))
    assert design_of(exp).hash != before.hash
