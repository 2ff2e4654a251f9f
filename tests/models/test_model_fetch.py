"""`claimbench model fetch`: a pinned checkpoint, checked by the loader, sha256 per file, never
half there. No network: huggingface_hub's download is replaced by a copy of the shipped
claimbench-tiny (a real HF-format directory)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import huggingface_hub
import pytest
from cli_helpers import assert_one_line_error, invoke

from claimbench.hardware.model_presets import get_preset, model_config, shape_from_config
from claimbench.harness.project_config import load_project_config
from claimbench.models.checkpoint import default_model_path, load_model
from claimbench.models.config import ModelConfig
from claimbench.models.fetch import (
    FETCH_FILE,
    PARTIAL_SUFFIX,
    FetchError,
    fetch_model,
    hub_download,
)
from claimbench.models.provenance import describe_model
from claimbench.tpucompile import check as tpu_check

REPO = "Qwen/Qwen2.5-7B-Instruct"
REV = "a09a35458c702b33eeacc393d103063234e8bc28"
TINY = default_model_path()
ROOT = Path(__file__).resolve().parents[2]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def fake_hub(monkeypatch) -> list[dict]:
    """snapshot_download copies claimbench-tiny (and a hub cache dir, as the real one leaves)."""
    calls: list[dict] = []

    def snapshot_download(**kwargs):
        calls.append(kwargs)
        dest = Path(kwargs["local_dir"])
        shutil.copytree(TINY, dest, dirs_exist_ok=True)
        (dest / ".cache" / "huggingface").mkdir(parents=True)
        (dest / ".cache" / "huggingface" / "lock").write_text("")
        return str(dest)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return calls


def test_fetch_pins_the_revision_hashes_every_file_and_the_loader_accepts_it(
    tmp_path: Path, fake_hub
) -> None:
    out = tmp_path / "qwen"
    fetched = fetch_model(REPO, REV, out)
    assert fetched.downloaded and fetched.path == out
    (call,) = fake_hub
    assert (call["repo_id"], call["revision"]) == (REPO, REV)
    assert "*.safetensors" in call["allow_patterns"]
    record = json.loads((out / FETCH_FILE).read_text())
    assert (record["repo"], record["revision"], record["source"]) == (
        REPO,
        REV,
        "https://huggingface.co",
    )
    shipped = sorted(p.name for p in TINY.iterdir() if p.is_file())
    assert sorted(record["files"]) == shipped  # the hub's hidden cache is not the model
    for name, entry in record["files"].items():
        assert entry["sha256"] == sha256(TINY / name)
        assert entry["bytes"] == (TINY / name).stat().st_size
    # A run serving it records the repo and commit beside the weights' sha256.
    described = describe_model(out)
    assert described["hub"] == {"repo": REPO, "revision": REV, "source": "https://huggingface.co"}
    assert described["weights_sha256"] == {
        name: entry["sha256"]
        for name, entry in record["files"].items()
        if name.endswith(".safetensors")
    }
    assert describe_model(TINY)["hub"] is None
    model, cfg = load_model(out)
    reference, reference_cfg = load_model(TINY)
    assert cfg == reference_cfg
    assert not (tmp_path / f"qwen{PARTIAL_SUFFIX}").exists()


def test_fetching_again_verifies_instead_of_downloading(tmp_path: Path, fake_hub) -> None:
    out = tmp_path / "qwen"
    fetch_model(REPO, REV, out)

    def no_download(repo, revision, dest):
        raise AssertionError("downloaded again")

    assert not fetch_model(REPO, REV, out, download=no_download).downloaded
    weights = out / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # the last byte of the last weight changed
    weights.write_bytes(bytes(data))
    with pytest.raises(FetchError, match="model.safetensors does not match its recorded sha256"):
        fetch_model(REPO, REV, out, download=no_download)
    with pytest.raises(FetchError, match=f"holds {REPO}@{REV}, not {REPO}@{'b' * 40}"):
        fetch_model(REPO, "b" * 40, out, download=no_download)


def test_a_checkpoint_the_engine_cannot_load_is_not_kept(tmp_path: Path) -> None:
    def without_tokenizer(repo, revision, dest):
        shutil.copytree(TINY, dest, dirs_exist_ok=True)
        (dest / "tokenizer.json").unlink()
        return "test"

    out = tmp_path / "qwen"
    with pytest.raises(FetchError, match="not a model the engine loads.*tokenizer.json"):
        fetch_model(REPO, REV, out, download=without_tokenizer)
    assert not out.exists() and not (tmp_path / f"qwen{PARTIAL_SUFFIX}").exists()


def test_an_interrupted_download_leaves_no_model_directory(tmp_path: Path) -> None:
    def interrupted(repo, revision, dest):
        (dest / "model.safetensors").write_bytes(b"first bytes")
        raise KeyboardInterrupt

    out = tmp_path / "qwen"
    with pytest.raises(KeyboardInterrupt):
        fetch_model(REPO, REV, out, download=interrupted)
    assert not out.exists()
    # What arrived stays in the partial directory, so the next fetch resumes from it.
    assert (tmp_path / f"qwen{PARTIAL_SUFFIX}" / "model.safetensors").is_file()


def test_a_moving_revision_is_refused() -> None:
    with pytest.raises(FetchError, match="not a 40-hex commit sha"):
        fetch_model(REPO, "main", Path("/nonexistent"), download=hub_download)


def test_cli_fetches_the_claims_yaml_model_from_a_local_dir(tmp_path: Path) -> None:
    root = ROOT
    out = tmp_path / "full"
    args = ("--root", str(root), "model", "fetch", "--out", str(out), "--from-dir", str(TINY))
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["path"] == str(out) and record["repo"] == REPO and record["revision"] == REV
    assert record["source"] == f"local directory {TINY.resolve()}"
    again = invoke(*args)
    assert again.exit_code == 0 and "verified" in again.stdout
    bad = invoke("--root", str(root), "model", "fetch", REPO, "--revision", "v1", "--out", str(out))
    assert_one_line_error(bad, "not a 40-hex commit sha")
    assert_one_line_error(
        invoke("--root", str(root), "model", "fetch", "someone/else", "--out", str(out)),
        "--revision is required for someone/else",
    )


# Qwen/Qwen2.5-7B-Instruct's config.json at the pinned commit (the fields the loader reads).
QWEN_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "hidden_act": "silu",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "max_position_embeddings": 32768,
    "model_type": "qwen2",
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "vocab_size": 152064,
}


def test_the_full_profile_names_the_pinned_checkpoints_shape() -> None:
    pinned = load_project_config(ROOT).full_profile.model
    assert (pinned.repo, pinned.revision) == (REPO, REV)
    shape = get_preset(pinned.preset)
    # The loader's reading of the real config.json gives exactly the preset tpu-check compiles.
    assert shape_from_config(pinned.preset, ModelConfig.from_hf(QWEN_CONFIG)) == shape
    assert shape.num_params == 7_615_616_512  # the model card's 7.61B
    assert model_config(shape).architecture == "Qwen2ForCausalLM"


@pytest.mark.slow
@pytest.mark.skipif(
    tpu_check.libtpu_unavailable() is not None, reason="libtpu (the tpu extra) is not installed"
)
def test_tpu_check_full_profile_compiles_the_claims_yaml_model() -> None:
    result = invoke(
        "--root", str(ROOT), "tpu-check", "--chip", "v6e", "--profile", "full",
        "--buckets", "16x8", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["model"] == "qwen2.5-7b-instruct" and report["ok"]
    (bucket,) = report["buckets"]
    # bf16 weights (15.2 GB) and the full profile's 8 GiB pool fit a 32 GB v6e.
    assert bucket["total_bytes"] < bucket["hbm_bytes"] and bucket["full_cache_copies"] == 0
