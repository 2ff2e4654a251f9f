"""`claimbench generate` and `claimbench bench` on a tiny random checkpoint."""

import json

import pytest
from engine_helpers import tiny_model
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers
from typer.testing import CliRunner

from claimbench.cli.main import app
from claimbench.models.checkpoint import save_model
from claimbench.models.config import ModelConfig
from claimbench.models.tokenizer import Tokenizer

TEXT = ["def add(a, b):\n    return a + b\n", "import os\nprint(os.getcwd())\n"] * 20


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-ckpt")
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    hf.train_from_iterator(TEXT, trainer)
    cfg = ModelConfig(
        vocab_size=hf.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
    )
    save_model(tiny_model(0, cfg), cfg, path)
    Tokenizer(hf, 1, 2).save(path)
    return path


def invoke(checkpoint, *args):
    return CliRunner().invoke(
        app, ["--model", str(checkpoint), "--dtype", "float32", *args], catch_exceptions=False
    )


@pytest.mark.slow
def test_generate_streams_only_the_text_to_stdout(checkpoint):
    as_json = invoke(
        checkpoint, "generate", "def add(", "--max-tokens", "6", "--ignore-eos", "--json"
    )
    assert as_json.exit_code == 0, as_json.output
    payload = json.loads(as_json.stdout)
    assert len(payload["token_ids"]) == payload["output_tokens"] == 6
    assert payload["finish_reason"] == "length" and payload["ttft_s"] > 0
    streamed = invoke(checkpoint, "generate", "def add(", "--max-tokens", "6", "--ignore-eos")
    assert streamed.exit_code == 0
    assert streamed.stdout == payload["text"]  # greedy, so the same tokens; nothing else
    assert "TTFT" in streamed.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--temperature", "-1"], "--temperature must be >= 0, got -1"),
        (["--max-tokens", "1000"], "--max-tokens 1000 exceeds 256"),
        (["--max-tokens", "0"], "--max-tokens must be in [1, 2147483647], got 0"),
        (["--top-p", "0"], "--top-p must be in (0, 1], got 0"),
        (["--top-k", "-2"], "--top-k must be in [0, 2147483647] (0 = off), got -2"),
        (["--seed", "-1"], "--seed must be in [0, 2**32)"),
    ],
)
def test_generate_bad_input_is_one_line_and_exit_2(checkpoint, args, message):
    result = invoke(checkpoint, "generate", "x", *args)
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    # The user typed a flag: the config field's name (top_p, max_tokens) must not show.
    assert not any(field in result.stderr for field in ("max_tokens", "top_p", "top_k"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--max-num-seqs", "64", "--max-num-batched-tokens", "32"],
            "--max-num-batched-tokens=32 < --max-num-seqs=64",
        ),
        (["--max-num-seqs", "0"], "--max-num-seqs must be > 0, got 0"),
        (["--kv-scale", "abc"], "--kv-scale 'abc' is neither 'calibrate' nor a number > 0"),
        (["--kv-pool-mb", "0"], "--kv-pool-mb must be a number > 0, got 0.0"),
        (["--kv-pool-mb", "inf"], "--kv-pool-mb must be a number > 0, got inf"),
        (["--kv-dtype", "int4"], "Invalid value for '--kv-dtype': 'int4' is not one of"),
        (["--output-len", "300"], "(--input-len 8, --range-ratio 0.0) + --output-len 300 exceed"),
    ],
)
def test_bench_bad_input_names_the_flag(checkpoint, args, message):
    result = invoke(checkpoint, "bench", "--input-len", "8", "--output-len", "4", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    for field in ("max_num_seqs", "max_num_batched_tokens", "kv_scale", "kv_pool_bytes"):
        assert field not in result.stderr


@pytest.mark.slow
def test_bench_prints_a_summary_and_saves_records(checkpoint, tmp_path):
    out = tmp_path / "records"
    args = ["bench", "--requests", "4", "--rate", "50", "--input-len", "20", "--range-ratio"]
    args += ["0.5", "--output-len", "5", "--max-num-seqs", "4", "--max-num-batched-tokens", "32"]
    result = invoke(checkpoint, *args, "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["num_completed"] == 4 and summary["total_output_tokens"] == 20
    assert summary["output_throughput"] > 0 and 0 <= summary["host_share_pct"] <= 100
    assert (out / "requests.parquet").is_file() and (out / "steps.parquet").is_file()
    # By default the records go under <root>/bench/, never into the claims' results store.
    root = tmp_path / "project"
    root.mkdir()
    table = invoke(checkpoint, "--root", str(root), *args)
    assert table.exit_code == 0, table.output
    assert "Serving Benchmark Result" in table.stdout and "Median TTFT (ms):" in table.stdout
    (records,) = (root / "bench").iterdir()
    assert (records / "requests.parquet").is_file() and (records / "steps.parquet").is_file()
    assert f"records in {records}" in table.stderr
    assert not (root / "results").exists()
