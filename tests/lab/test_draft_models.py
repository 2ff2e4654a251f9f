"""The full profile's speculative draft: Qwen2.5-0.5B-Instruct pinned in the spec claims'
params, its preset against its config.json, its fetch, and where a run finds it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import invoke

from claimbench.engine.spec.draft_model import check_draft
from claimbench.hardware.model_presets import get_preset, model_config, shape_from_config
from claimbench.harness.claims import find_claim, load_claims
from claimbench.lab.speculative.draft_models import (
    claim_draft_pins,
    draft_model_name,
    draft_path,
    pinned_draft,
)
from claimbench.models import fetch
from claimbench.models.checkpoint import default_draft_path, default_model_path, read_config
from claimbench.models.config import ModelConfig

ROOT = Path(__file__).resolve().parents[2]
REPO = "Qwen/Qwen2.5-0.5B-Instruct"
REV = "7ae557604adf67be50417f59c2c2f167def9a775"
# Qwen/Qwen2.5-0.5B-Instruct's config.json at the pinned commit (the fields the loader reads).
QWEN_05B_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "hidden_act": "silu",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "max_window_layers": 21,
    "model_type": "qwen2",
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}


def test_the_spec_claims_full_draft_is_the_pinned_qwen_05b_and_may_draft_for_the_7b() -> None:
    claims = load_claims(ROOT)
    for claim_id in ("spec-decode-gain", "spec-vs-batching"):
        pin = pinned_draft(find_claim(claims, claim_id).profile_params("full")["draft_model"])
        assert (pin.repo, pin.revision, pin.preset) == (REPO, REV, "qwen2.5-0.5b-instruct")
        assert find_claim(claims, claim_id).profile_params("quick").get("draft_model") is None
    assert [(p.repo, p.revision) for p in claim_draft_pins(claims)] == [(REPO, REV)]
    shape = get_preset("qwen2.5-0.5b-instruct")
    # The loader's reading of the real config.json gives exactly the preset tpu-check compiles.
    assert shape_from_config(shape.name, ModelConfig.from_hf(QWEN_05B_CONFIG)) == shape
    assert shape.num_params == 494_032_768  # the model card's 0.49B
    draft, target = model_config(shape), model_config(get_preset("qwen2.5-7b-instruct"))
    assert (draft.head_dim, draft.vocab_size, target.vocab_size) == (64, 151936, 152064)
    check_draft(draft, target, None, None)  # a prefix of the 7B's vocabulary, same ids
    with pytest.raises(ValueError, match=r"bos_token_id \(0\) differs from the target's"):
        check_draft(read_config(default_draft_path()), target, None, None)


def test_a_pinned_draft_is_fetched_by_its_repo_and_found_where_the_fetch_put_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fetch, "DEFAULT_CACHE", tmp_path / "models")
    value = {"repo": REPO, "revision": REV, "preset": "qwen2.5-0.5b-instruct"}
    with pytest.raises(ValueError, match=f"run `claimbench model fetch {REPO}`"):
        draft_path(value)
    assert draft_model_name(value) == "qwen2.5-0.5b-instruct"  # tpu-check needs no weights
    # The revision comes from the spec claims' params, as the 7B's from full_profile.
    args = ("--root", str(ROOT), "model", "fetch", REPO, "--from-dir", str(default_model_path()))
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert (record["repo"], record["revision"]) == (REPO, REV)
    assert draft_path(value) == Path(record["path"]) == fetch.default_dir(REPO, REV)
    assert draft_path(None) is None and draft_model_name(None) is None


def test_a_bad_draft_param_is_one_line() -> None:
    with pytest.raises(ValueError, match="param draft_model revision: must be a 40-hex") as info:
        pinned_draft({"repo": REPO, "revision": "main"})
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="param draft_model preset: unknown preset 'qwen-9b'"):
        pinned_draft({"repo": REPO, "revision": REV, "preset": "qwen-9b"})


def test_the_shipped_model_drafts_with_the_shipped_draft_whatever_the_pin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pinned draft belongs to the model it shares a tokenizer with: a run serving the
    shipped model (a lent device with no checkpoints) keeps the shipped draft, not an error."""
    from claimbench.lab.speculative.spec_trials import arm_settings, engine_options

    monkeypatch.setattr(fetch, "DEFAULT_CACHE", tmp_path / "models")  # nothing fetched
    params = {
        "batch": 1,
        "num_spec_tokens": 4,
        "input_len": 8,
        "output_len": 8,
        "proposer": "draft",
        "draft_model": {"repo": REPO, "revision": REV, "preset": "qwen2.5-0.5b-instruct"},
    }
    arms = arm_settings(params).settings
    shipped = engine_options(params, arms, serves_shipped_model=True)["speculative"]
    assert shipped["speculative"] == "draft" and "draft_model_path" not in shipped
    with pytest.raises(ValueError, match="model fetch"):
        engine_options(params, arms, serves_shipped_model=False)
