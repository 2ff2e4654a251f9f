"""Provenance: git dirtiness of the result sources only, CPU model, origin, model identity, and
what run_claim writes into meta.json about the model an experiment used."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import types
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from claimbench.hardware import host
from claimbench.harness import provenance
from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.context import run_claim
from claimbench.models.config import ModelConfig
from claimbench.models.provenance import ModelDirError, check_model_dir, describe_model

CONFIG = ModelConfig(
    vocab_size=50,
    hidden_size=8,
    intermediate_size=16,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=2,
    max_position_embeddings=64,
)


def git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path / "repo"
    for name in ("claimbench/a.py", "experiments/e.py", "site/index.html", "results/s.parquet"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("v1\n")
    (root / "claims.yaml").write_text("[]\n")
    (root / "README.md").write_text("v1\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    return root


def test_quick_start_outputs_leave_the_tree_clean(repo):
    # The quick start rewrites the site and the scores and adds runs: none of it is code.
    (repo / "site" / "index.html").write_text("v2\n")
    (repo / "results" / "s.parquet").write_text("v2\n")
    (repo / "results" / "runs").mkdir()
    (repo / "results" / "runs" / "meta.json").write_text("{}\n")
    (repo / "README.md").write_text("v2\n")
    state = provenance.git_state(repo)
    assert len(state["sha"]) == 40 and state["dirty"] is False


@pytest.mark.parametrize(
    "change", ["claims.yaml", "claimbench/a.py", "experiments/new.py", "pyproject.toml"]
)
def test_result_sources_make_the_tree_dirty(repo, change):
    (repo / change).write_text("changed\n")  # modified, or new and not ignored
    assert provenance.git_state(repo)["dirty"] is True


def test_git_state_outside_git(tmp_path):
    assert provenance.git_state(tmp_path) == {"sha": None, "dirty": None}


def test_cpu_model_from_cpuinfo_else_platform(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Fake CPU @ 3.0GHz\n")
    assert host.cpu_model(cpuinfo) == "Fake CPU @ 3.0GHz"
    monkeypatch.setattr(host.platform, "processor", lambda: "fallback-arch")
    assert host.cpu_model(tmp_path / "missing") == "fallback-arch"


def test_origin_is_the_env_var_else_the_host(monkeypatch):
    monkeypatch.setenv(provenance.ORIGIN_ENV, "nightly-tpu")
    assert provenance.origin() == "nightly-tpu"
    monkeypatch.delenv(provenance.ORIGIN_ENV)
    monkeypatch.setattr(provenance.socket, "gethostname", lambda: "host-7")
    assert provenance.origin() == "host-7"


def write_model(path, *, shards: int = 1):
    """A model directory as an engine loads it: config.json, safetensors, tokenizer.json."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(CONFIG.to_hf()))
    rng = np.random.default_rng(0)
    for i in range(shards):
        tensors = {f"t{i}.a": rng.random((3, 4), dtype=np.float32), f"t{i}.b": np.zeros(5)}
        save_file(tensors, str(path / f"model-{i}.safetensors"))
    (path / "tokenizer.json").write_text("{}")
    return path


def test_describe_model_hashes_every_weight_file(tmp_path):
    model = write_model(tmp_path / "my-model", shards=2)
    described = describe_model(model)
    assert described["name"] == "my-model" and described["path"] == str(model.resolve())
    assert described["architecture"] == {
        "model_type": "llama",
        "num_layers": 2,
        "hidden_size": 8,
        "num_q_heads": 4,
        "num_kv_heads": 2,
        "head_dim": 2,
        "vocab_size": 50,
        "num_params": 2 * (12 + 5),  # the elements stored, not the config's formula
    }
    expected = {
        f.name: hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(model.glob("*.safetensors"))
    }
    assert described["weights_sha256"] == expected and len(expected) == 2


def test_a_rewritten_weight_file_gets_a_new_hash(tmp_path):
    model = write_model(tmp_path / "m")
    before = describe_model(model)["weights_sha256"]
    save_file({"x": np.ones(3, dtype=np.float32)}, str(model / "model-0.safetensors"))
    assert describe_model(model)["weights_sha256"] != before


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (lambda m: shutil.rmtree(m), "is not a directory"),
        (lambda m: (m / "config.json").unlink(), "has no config.json"),
        (lambda m: (m / "config.json").write_text("{"), "config.json is not valid JSON"),
        (
            lambda m: (m / "config.json").write_text(json.dumps({"architectures": ["Bert"]})),
            "unsupported architecture",
        ),
        (lambda m: (m / "model-0.safetensors").unlink(), "has no *.safetensors"),
        (
            lambda m: (m / "model-0.safetensors").write_bytes(b"\xff" * 16),
            "is not a readable safetensors file",
        ),
        (lambda m: (m / "tokenizer.json").unlink(), "has no tokenizer.json"),
    ],
)
def test_check_model_dir_names_the_problem(tmp_path, breakage, message):
    model = write_model(tmp_path / "m")
    check_model_dir(model)
    breakage(model)
    with pytest.raises(ModelDirError, match=message.replace("*", r"\*")):
        check_model_dir(model)


def stored_meta(project, run, model_option=None, claim_id="fake-pass"):
    claim = find_claim(load_claims(project), claim_id)
    run_dir = run_claim(
        claim,
        types.SimpleNamespace(run=run),
        root=project,
        results_dir=project / "results",
        profile="quick",
        trials=1,
        seed=0,
        dtype="float32",
        model_option=model_option,
    )
    return claim, json.loads((run_dir / "meta.json").read_text())


def test_meta_records_the_model_the_experiment_read(project, tmp_path, monkeypatch):
    monkeypatch.setenv(provenance.ORIGIN_ENV, "laptop-of-tester")
    model = write_model(tmp_path / "weights-v2")

    def run(ctx):
        # Read twice (as for a tokenizer and for weights): recorded once.
        assert ctx.model_path == ctx.model_path == model
        ctx.record("score", 1.0, trial=0)

    claim, meta = stored_meta(project, run, model_option=model)
    assert meta["model"] == describe_model(model)
    assert meta["other_models"] == []
    assert meta["origin"] == "laptop-of-tester"
    assert meta["prediction_hash"] == claim.prediction_hash("quick")
    assert meta["prediction"] == {
        "conditions": [{"metric": "score", "op": ">=", "value": 1.0, "basis": "measured"}],
        "confidence": 0.8,
    }
    assert meta["engine_configs"] == []
    assert meta["hardware"]["cpu_model"] == host.cpu_model()
    assert meta["hardware"]["attention_backend"]


def test_meta_has_no_model_when_the_experiment_loads_none(project, tmp_path):
    # A --model that an analytic experiment never reads is not its provenance.
    model = write_model(tmp_path / "unused")
    _, meta = stored_meta(
        project, lambda ctx: ctx.record("score", 1.0, trial=0), model_option=model
    )
    assert meta["model"] is None and meta["other_models"] == []


def test_exported_source_records_its_commit(repo, tmp_path):
    script = Path(__file__).resolve().parents[2] / "scripts" / "export_source.sh"
    export = repo / "ignored" / "export"  # inside another checkout, as on a copied tree
    # The script exports the repository it lives in; run it on a copy inside `repo`.
    (repo / "scripts").mkdir(exist_ok=True)
    (repo / "scripts" / "export_source.sh").write_text(script.read_text())
    git(repo, "add", "scripts")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "script")
    subprocess.run(["bash", str(repo / "scripts" / "export_source.sh"), str(export)], check=True)
    sha = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert not (export / "results").exists() and (export / "claims.yaml").exists()
    state = provenance.git_state(export)
    # The commit is known; whether files changed after the export is not.
    assert state == {"sha": sha, "dirty": None, "exported": True}


def test_a_malformed_source_commit_is_ignored(tmp_path):
    (tmp_path / "SOURCE_COMMIT").write_text("not-a-sha\n")
    assert provenance.git_state(tmp_path) == {"sha": None, "dirty": None}
