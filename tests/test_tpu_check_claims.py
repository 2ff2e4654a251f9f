"""tpu-check --claims: the engines each claim's experiment builds, and each compiled for a TPU
chip at its largest bucket (compiles skipped where libtpu is not installed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from claimbench.cli.main import app
from claimbench.engine.buckets import bucket_pairs
from claimbench.engine.config import EngineConfig
from claimbench.harness import tpu_check
from claimbench.harness.claim_engines import ClaimEngine, claim_engines
from claimbench.harness.claims import find_claim, load_claims
from claimbench.harness.tpu_check_claims import _check_engine

ROOT = Path(__file__).resolve().parents[1]


def engines_of(claim_id: str, profile: str = "full") -> list[ClaimEngine]:
    return claim_engines(ROOT, find_claim(load_claims(ROOT), claim_id), profile)


def test_a_comparison_claim_builds_one_engine_per_setting() -> None:
    bf16, int8 = engines_of("kv-int8")
    assert (bf16.setting, int8.setting) == ("bf16", "int8")
    assert (bf16.options["kv_dtype"], int8.options["kv_dtype"]) == ("bf16", "int8")
    # The claim's full engine params, and the quality pass's window-sized max_model_len.
    assert int8.options["kv_pool_bytes"] == 2**30 and int8.options["max_num_seqs"] == 64
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


@pytest.mark.skipif(tpu_check.libtpu_unavailable() is not None, reason="libtpu not installed")
def test_cli_compiles_a_quick_claims_engine_at_its_largest_bucket() -> None:
    result = CliRunner().invoke(
        app,
        ["tpu-check", "--chip", "v5e", "--claims", "tenant-tail-hidden", "--profile", "quick"]
        + ["--json"],
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
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
