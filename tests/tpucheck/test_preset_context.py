"""Model presets carry their checkpoints' context length and RoPE, so a full-profile claim's
max_model_len is checked against the real model's limit, not a default."""

from __future__ import annotations

from claimbench.hardware.model_presets import PRESETS, get_preset, model_config
from claimbench.tpucheck.claim_engines import ClaimEngine
from claimbench.tpucheck.claims import _check_engine
from claimbench.tpucompile.check import resolve_model


def test_presets_carry_the_checkpoints_context_and_rope() -> None:
    qwen = model_config(get_preset("qwen2.5-7b-instruct"))
    assert qwen.max_position_embeddings == 32768
    assert qwen.rope_theta == 1e6 and qwen.rms_norm_eps == 1e-6
    llama = model_config(get_preset("llama-3.1-8b"))
    assert llama.max_position_embeddings == 131072
    assert llama.rope_scaling is not None and llama.rope_scaling.factor == 8.0
    # Every dense preset maps with its own limit, none left at the config default.
    limits = {
        name: model_config(shape).max_position_embeddings
        for name, shape in PRESETS.items()
        if shape.num_experts == 1
    }
    assert all(limit >= 4096 for limit in limits.values()), limits


def test_a_long_context_workload_is_checked_against_the_presets_limit() -> None:
    name, cfg = resolve_model("qwen2.5-7b-instruct")
    # kv-dominates' measured side serves 32 sequences of 4096 tokens: within the limit.
    assert cfg.max_position_embeddings >= 4096
    too_long = _check_engine(ClaimEngine("c", "", {"max_model_len": 32769}), "v6e", name, cfg)
    assert too_long.bucket is None and "max_position_embeddings=32768" in too_long.error
