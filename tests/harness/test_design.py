"""An experiment's design hash: which modules it covers, and that it moves with their code."""

from __future__ import annotations

from pathlib import Path

import pytest

from claimbench.harness.design import design_of

REPO = Path(__file__).resolve().parents[2]


def write_experiment(root: Path, name: str, text: str) -> Path:
    path = root / "experiments" / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_design_follows_every_project_module_it_reaches(tmp_path):
    exp = write_experiment(
        tmp_path,
        "probe",
        "from claimbench.lab.load import tenant_runs as tr\n"
        "from claimbench.engine.sampling_params import SamplingParams\n"
        "from experiments.shared_bits import X\n"
        "def run(ctx):\n"
        "    from claimbench.harness.context import RunContext\n"
        "    cmd = ['-m', 'claimbench.lab.probes.cold_start_probe']\n",
    )
    write_experiment(tmp_path, "shared_bits", "from claimbench.lab.quality import quality\nX = 1\n")
    design = design_of(exp)
    modules = set(design.modules)
    # Helpers, transitively (tenant_runs -> workload), a helper named as a string, a sibling, the
    # engine and kernels it runs, the run context, and the packages whose __init__ importing runs.
    for name in (
        "experiments.probe",
        "experiments.shared_bits",
        "claimbench.lab.load.tenant_runs",
        "claimbench.lab.quality.quality",
        "claimbench.lab.probes.cold_start_probe",
        "claimbench.workload.build",
        "claimbench.engine.sampling_params",
        "claimbench.engine.worker.sampler",
        "claimbench.engine.worker.buckets",
        "claimbench.kernels.native",
        "claimbench.harness.context",
        "claimbench",
        "claimbench.lab",
    ):
        assert name in modules, name
    # What only scores or shows stored runs is not part of what a run measured.
    assert not modules & {"claimbench.harness.scoring", "claimbench.harness.intervals"}
    assert not any(m.startswith(("claimbench.site", "claimbench.cli")) for m in modules)
    # The data files the reached packages read: weights, tokenizer, corpus, kernel sources.
    data = set(design.data_files)
    for label in (
        "claimbench.models:assets/claimbench-tiny/model.safetensors",
        "claimbench.models:assets/claimbench-tiny/tokenizer.json",
        "claimbench.models:assets/heldout.txt.gz",
        "claimbench.kernels.native:paged_decode.cc",
    ):
        assert label in data, label
    assert not any(label.endswith(".md") for label in data)


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


def test_design_hash_keeps_imports_and_their_aliases(tmp_path):
    write_experiment(tmp_path, "helper", "A = 1\nB = 2\n")
    exp = write_experiment(tmp_path, "probe", "from experiments.helper import A, B\nX = A - B\n")
    before = design_of(exp)
    write_experiment(
        tmp_path, "probe", "from experiments.helper import A as B, B as A\nX = A - B\n"
    )
    assert design_of(exp).hash != before.hash
    # Docstrings and comments describe the code; they never move the hash.
    write_experiment(
        tmp_path,
        "probe",
        '"""Probe."""\nfrom experiments.helper import A, B  # the pair\nX = A - B\n',
    )
    assert design_of(exp).hash == before.hash
