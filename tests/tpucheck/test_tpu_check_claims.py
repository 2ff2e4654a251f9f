"""tpu-check --claims: the engines each claim's experiment builds, and each compiled for a TPU
chip at its largest bucket (compiles skipped where libtpu is not installed)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax.numpy as jnp
import pytest
from typer.testing import CliRunner

from claimbench.cli.main import app
from claimbench.engine.config import EngineConfig
from claimbench.engine.worker.buckets import bucket_pairs
from claimbench.harness.claims import find_claim, load_claims
from claimbench.tpucheck.claim_engines import ClaimEngine, claim_engines
from claimbench.tpucheck.claims import ClaimCheck, _check_engine, resident_groups
from claimbench.tpucompile import check as tpu_check
from claimbench.tpucompile.check import BucketReport

ROOT = Path(__file__).resolve().parents[2]


def engines_of(claim_id: str, profile: str = "full") -> list[ClaimEngine]:
    return claim_engines(ROOT, find_claim(load_claims(ROOT), claim_id), profile)


def test_a_comparison_claim_builds_one_engine_per_setting() -> None:
    bf16, int8 = engines_of("kv-int8")
    assert (bf16.setting, int8.setting) == ("bf16", "int8")
    assert (bf16.options["kv_dtype"], int8.options["kv_dtype"]) == ("bf16", "int8")
    # The claim's full engine params, and the quality pass's window-sized max_model_len.
    assert int8.options["hbm_utilization"] == 0.9 and int8.options["max_num_seqs"] == 64
    assert int8.options["max_model_len"] == 1025 and int8.model is None
    levers = {e.setting: e.options for e in engines_of("levers-multiply")}
    assert levers["both"]["weights"] == "fp8" and levers["both"]["kv_dtype"] == "int8"
    assert levers["base"]["weights"] == "bf16" and levers["base"]["kv_dtype"] == "bf16"


def test_tp_and_own_model_claims() -> None:
    assert [e.options["tp"] for e in engines_of("tp-refutation")] == [1, 2, 4]
    (moe,) = engines_of("moe-disqualified")
    assert moe.model == "claimbench-tiny-moe" and moe.options["max_num_seqs"] == 32
    # Claims with one engine: their profile's engine params as given.
    (tenant,) = engines_of("tenant-tail-hidden")
    assert tenant.setting == "" and tenant.options == {
        "max_num_seqs": 32,
        "max_num_batched_tokens": 512,
        "max_model_len": 1024,
    }


def test_settings_the_engine_refuses_are_one_line_without_compiling() -> None:
    name, cfg = tpu_check.resolve_model("qwen2.5-7b-instruct")
    bad_tp = _check_engine(ClaimEngine("c", "", {"tp": 3}), "v6e", name, cfg)
    assert bad_tp.bucket is None and "does not divide the model's 28 query heads" in bad_tp.error
    too_long = _check_engine(ClaimEngine("c", "", {"max_model_len": 40000}), "v6e", name, cfg)
    assert "exceeds the model's max_position_embeddings" in too_long.error
    unknown = _check_engine(ClaimEngine("c", "", {"kv_dtype": "int3"}), "v6e", name, cfg)
    assert not unknown.ok and "int3" in unknown.error and "\n" not in unknown.error


@pytest.mark.slow
@pytest.mark.skipif(tpu_check.libtpu_unavailable() is not None, reason="libtpu not installed")
def test_cli_compiles_a_quick_claims_engine_at_its_largest_bucket() -> None:
    result = CliRunner().invoke(
        app,
        ["tpu-check", "--chip", "v5e", "--claims", "tenant-tail-hidden", "--profile", "quick"]
        + ["--json"],
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)["engines"]
    (engine,) = engines_of("tenant-tail-hidden", "quick")
    tokens, seqs = bucket_pairs(EngineConfig(**engine.options))[-1]
    assert row["ok"] and row["model"] == "claimbench-tiny" and row["tp"] == 1
    assert (row["bucket"]["num_tokens"], row["bucket"]["num_seqs"]) == (tokens, seqs)
    assert row["bucket"]["full_cache_copies"] == 0


def test_cli_unknown_claim_is_one_line_and_exit_2() -> None:
    result = CliRunner().invoke(app, ["tpu-check", "--chip", "v6e", "--claims", "no-such"])
    assert result.exit_code == 2 and "no claim 'no-such'" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_cli_claims_with_tp_or_buckets_is_one_line_and_exit_2() -> None:
    for extra in (["--tp", "4"], ["--buckets", "16x8"]):
        args = ["tpu-check", "--chip", "v6e", "--claims", "kv-int8", *extra]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2 and "drop --tp and --buckets" in result.output


def test_engines_follow_what_each_experiment_builds_and_holds_at_once() -> None:
    _, qwen = tpu_check.resolve_model("qwen2.5-7b-instruct")
    claim = find_claim(load_claims(ROOT), "bf16-not-fp16")
    bf16, fp16 = claim_engines(ROOT, claim, "full", qwen)
    # No float32 engine (a layer-by-layer reference), and each engine alone on the chip.
    assert (bf16.options["dtype"], fp16.options["dtype"]) == ("bfloat16", "float16")
    assert (bf16.group, fp16.group) != (0, 0) and bf16.group != fp16.group
    # The speculative claims build a plain and a speculative engine one at a time; the
    # speculative one (target and draft at once) drafts with the pinned Qwen2.5-0.5B.
    for claim_id in ("spec-decode-gain", "spec-vs-batching"):
        plain, spec = claim_engines(ROOT, find_claim(load_claims(ROOT), claim_id), "full")
        assert (plain.options["speculative"], spec.options["speculative"]) == ("none", "draft")
        assert plain.group != spec.group
        assert (plain.draft, spec.draft) == (None, "qwen2.5-0.5b-instruct")
    quick = claim_engines(ROOT, find_claim(load_claims(ROOT), "spec-decode-gain"), "quick")
    assert [e.draft for e in quick] == [None, None]  # the engine's own: the shipped tiny draft


def test_pools_computed_at_run_time_come_from_the_checked_model() -> None:
    from claimbench.engine.kv.kv_cache import pool_bytes

    _, qwen = tpu_check.resolve_model("qwen2.5-7b-instruct")
    claims = load_claims(ROOT)
    (waste,) = claim_engines(ROOT, find_claim(claims, "paged-waste"), "full", qwen)
    # paged_waste._engine: pool_tokens = 65536 slots of 16-token pages, and the null page.
    assert waste.options["kv_pool_bytes"] == pool_bytes(qwen, jnp.bfloat16, 16, 4097)
    (kv,) = claim_engines(ROOT, find_claim(claims, "kv-dominates"), "full", qwen)
    # 32 sequences of 4096 tokens: the context the preset's 32768 positions allow in full.
    assert kv.options["kv_pool_bytes"] == pool_bytes(qwen, jnp.bfloat16, 16, 1 + 32 * 256)
    assert kv.options["max_model_len"] == 4096
    (decode,) = claim_engines(ROOT, find_claim(claims, "decode-bandwidth-bound"), "full", qwen)
    assert decode.options["max_num_seqs"] == 32
    assert decode.options["kv_pool_bytes"] == pool_bytes(qwen, jnp.bfloat16, 16, 1 + 32 * 68)


def _bucket(total: int, temp: int, hbm: int = 100) -> BucketReport:
    return BucketReport(
        num_tokens=16,
        num_seqs=8,
        error=None,
        compile_s=0.0,
        weight_bytes=0,
        kv_pool_bytes=0,
        total_bytes=total,
        temp_bytes=temp,
        hbm_bytes=hbm,
    )


def test_engines_held_at_once_are_summed_against_the_chip() -> None:
    checks = [
        ClaimCheck("together", "a", "m", 1, _bucket(60, 10), group=0),
        ClaimCheck("together", "b", "m", 1, _bucket(50, 20), group=0),
        ClaimCheck("apart", "a", "m", 1, _bucket(60, 10), group=0),
        ClaimCheck("apart", "b", "m", 1, _bucket(50, 20), group=1),
        ClaimCheck("draft", "s", "m", 1, _bucket(40, 5), draft=_bucket(30, 25), group=0),
        ClaimCheck("draft", "p", "m", 1, _bucket(20, 5), group=0),
    ]
    # Each engine alone fits 100 bytes; each engine's own draft adds its arguments.
    assert all(c.ok for c in checks) and checks[4].resident_bytes == 35 + 5
    groups = {g.claim_id: g for g in resident_groups(checks, 100)}
    assert set(groups) == {"together", "draft"}  # one engine at a time: nothing to sum
    together = groups["together"]
    # Both engines' arguments resident, the larger step's temporaries on top.
    assert (together.resident_bytes, together.temp_bytes, together.total_bytes) == (80, 20, 100)
    assert together.ok
    draft = groups["draft"]
    assert (draft.resident_bytes, draft.temp_bytes) == (40 + 15, 25)
    assert resident_groups(checks[:2], 99)[0].error.startswith("does not fit HBM: 2 engines")
    # An engine alone with its draft: both steps' arguments and the larger temporaries.
    crowded = ClaimCheck("draft", "s", "m", 1, _bucket(80, 5), draft=_bucket(30, 25))
    assert (crowded.resident_bytes, crowded.temp_bytes) == (80, 25) and not crowded.ok
    assert crowded.error.startswith("does not fit HBM with its draft: 0.00 GB")


def test_a_draft_that_cannot_propose_for_the_model_is_refused_without_compiling() -> None:
    name, qwen = tpu_check.resolve_model("qwen2.5-7b-instruct")
    spec = ClaimEngine("c", "speculative", {"speculative": "draft", "max_num_batched_tokens": 64})
    refused = _check_engine(spec, "v6e", name, qwen)
    # The shipped tiny draft: another tokenizer, whose special ids are not Qwen's.
    assert refused.bucket is None and "bos_token_id (0) differs" in refused.error
    larger = dataclasses.replace(spec, draft="qwen2.5-7b-instruct")
    qwen_05b = tpu_check.resolve_model("qwen2.5-0.5b-instruct")
    refused = _check_engine(larger, "v6e", *qwen_05b)
    assert "vocabulary (152064) is larger than the target's (151936)" in refused.error
