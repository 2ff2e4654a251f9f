"""`generate` and `bench` with speculative decoding, and its bad input."""

import json

import pytest
from engine_helpers import tiny_model
from test_engine_cli import checkpoint, invoke  # noqa: F401 (checkpoint is a fixture)

from claimbench.models.checkpoint import read_config, save_model
from claimbench.models.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def draft_dir(checkpoint, tmp_path_factory):  # noqa: F811
    """A draft for the checkpoint: another random model over the same tokenizer."""
    path = tmp_path_factory.mktemp("tiny-draft")
    cfg = read_config(checkpoint)
    save_model(tiny_model(1, cfg), cfg, path)
    Tokenizer.from_dir(checkpoint).save(path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("proposer", ["ngram", "draft"])
def test_generate_with_speculation_matches_plain_greedy(checkpoint, draft_dir, proposer):  # noqa: F811
    args = [
        "generate",
        "def add(a, b):\n    return",
        "--max-tokens",
        "12",
        "--ignore-eos",
        "--json",
    ]
    plain = json.loads(invoke(checkpoint, *args).stdout)
    spec = ["--speculative", proposer, "--num-spec-tokens", "3", "--draft-model", str(draft_dir)]
    result = invoke(checkpoint, *args, *spec)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["token_ids"] == plain["token_ids"]
    if proposer == "draft":  # the draft proposes every step; n-gram only on a match
        assert payload["num_draft_tokens"] > 0 and 1 <= payload["mean_acceptance_length"] <= 4


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["--num-spec-tokens", "0"], "--num-spec-tokens must be in [1, 16], got 0"),
        (["--num-spec-tokens", "17"], "--num-spec-tokens must be in [1, 16], got 17"),
        (["--speculative", "medusa"], "Invalid value for '--speculative': 'medusa' is not one of"),
        # The shipped draft's 4096-token vocabulary is larger than this checkpoint's.
        (
            ["--speculative", "draft"],
            "draft model's vocabulary (4096) is larger than the target's",
        ),
    ],
)
@pytest.mark.parametrize("command", ["generate", "bench"])
def test_bad_speculation_input_is_one_line_and_exit_2(checkpoint, command, args, message):  # noqa: F811
    extra = ["x"] if command == "generate" else ["--input-len", "8", "--output-len", "4"]
    result = invoke(checkpoint, command, *extra, *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "num_spec_tokens" not in result.stderr


@pytest.mark.slow
def test_bench_reports_acceptance(checkpoint, draft_dir, tmp_path):  # noqa: F811
    args = ["bench", "--requests", "4", "--input-len", "20", "--output-len", "8"]
    args += ["--max-num-seqs", "4", "--max-num-batched-tokens", "32", "--out", str(tmp_path)]
    args += ["--speculative", "draft", "--draft-model", str(draft_dir)]
    summary = json.loads(invoke(checkpoint, *args, "--json").stdout)
    assert summary["total_output_tokens"] == 32
    assert summary["num_draft_tokens"] >= summary["num_accepted_tokens"] >= 0
    assert summary["mean_acceptance_length"] == 1 + (
        summary["num_accepted_tokens"] / summary["num_drafts"]
    )
    assert 0 <= summary["draft_share_pct"] <= 100
    table = invoke(checkpoint, *args)
    assert "Speculative Decoding" in table.stdout and "Position 2 acceptance (%):" in table.stdout
