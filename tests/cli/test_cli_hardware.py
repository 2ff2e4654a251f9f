"""`claimbench env` and `claimbench roofline` through the Typer app."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from claimbench.cli.main import app

runner = CliRunner()

BOOK_ARGS = [
    "roofline",
    "--model",
    "llama-3-70b",
    "--chip",
    "v5e",
    "--chips",
    "8",
    "--batch",
    "32",
    "--context",
    "8192",
    "--weights",
    "int8",
    "--kv",
    "int8",
]


def test_env_table():
    result = runner.invoke(app, ["env"])
    assert result.exit_code == 0, result.output
    assert "platform" in result.output
    assert "cpu" in result.output
    assert "jax version" in result.output


def test_env_json():
    result = runner.invoke(app, ["env", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["platform"] == "cpu"
    assert info["chip"] is None and info["chip_spec"] is None
    assert info["price_per_hour"] is None
    assert info["device_count"] >= 1


def test_roofline_table():
    result = runner.invoke(app, BOOK_ARGS)
    assert result.exit_code == 0, result.output
    assert "step time (ms)" in result.output
    assert "17.32" in result.output  # the Scaling Book's ~17 ms
    assert "memory" in result.output


def test_roofline_json():
    result = runner.invoke(app, [*BOOK_ARGS, "--json", "--ici"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["inputs"]["chips"] == 8 and out["inputs"]["ici"] is True
    est = out["estimate"]
    assert est["step_s"] == pytest.approx(17e-3, rel=0.10)
    assert est["tokens_per_s_per_chip"] == pytest.approx(235, rel=0.10)
    assert est["ici_s"] > 0
    assert est["max_batch"] == 33


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "gpt-2"], "--model 'gpt-2' is neither a preset (llama-2-13b,"),
        (["--chip", "v4"], "Invalid value for '--chip': 'v4' is not one of 'v5e',"),
        (["--weights", "fp4"], "Invalid value for '--weights': 'fp4' is not one of"),
        (["--kv", "f32"], "Invalid value for '--kv': 'f32' is not one of"),
        (["--chips", "0"], "--chips must be > 0, got 0"),
        (["--batch", "-3"], "--batch must be > 0, got -3"),
        (["--context", "0"], "--context must be > 0, got 0"),
        (["--reserve", "1.5"], "--reserve must be in [0, 1), got 1.5"),
        (["--compute", "fp8"], "TPU v5e has no published fp8 peak"),
    ],
)
def test_roofline_bad_input(args, message):
    result = runner.invoke(app, ["roofline", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_roofline_tiny_model():
    result = runner.invoke(app, ["roofline", "--model", "claimbench-tiny", "--chip", "h200"])
    assert result.exit_code == 0, result.output
    assert "claimbench-tiny on 1 x h200" in result.output


def write_config(path, **dims):
    path.mkdir()
    config = {
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": 1000,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 32,
    }
    path.joinpath("config.json").write_text(json.dumps(config | dims))
    return path


def roofline_json(*args):
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_roofline_model_is_a_preset_or_a_model_directory(tmp_path):
    small = write_config(tmp_path / "my-model")
    wider = write_config(tmp_path / "wider", num_key_value_heads=8)
    est = roofline_json("roofline", "--model", str(small))
    assert est["inputs"]["model"] == "my-model"
    # K and V, 4 layers, 2 KV heads of 32 in bf16: the directory's config.json gives the shape.
    assert est["estimate"]["kv_bytes_per_token"] == 2 * 4 * 2 * 32 * 2
    # The global --model is the same option: roofline models it when given alone.
    from_global = roofline_json("--model", str(wider), "roofline")
    assert from_global["inputs"]["model"] == "wider"
    assert from_global["estimate"]["kv_bytes_per_token"] == 2 * 4 * 8 * 32 * 2


def test_roofline_model_given_twice_or_broken(tmp_path):
    small = write_config(tmp_path / "m")
    both = runner.invoke(app, ["--model", str(small), "roofline", "--model", "llama-3-70b"])
    assert both.exit_code == 2 and "give the model once" in both.output
    assert len(both.output.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()
    empty = runner.invoke(app, ["roofline", "--model", str(tmp_path / "empty")])
    assert empty.exit_code == 2 and "has no config.json" in empty.output


def all_commands(group=None, prefix=()):
    """Every command path of the app, groups included: new commands are covered unasked."""
    group = group or typer.main.get_command(app)
    paths = [list(prefix)]
    for name, command in getattr(group, "commands", {}).items():
        paths += all_commands(command, (*prefix, name))
    return paths


COMMANDS = all_commands()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "claimbench")
def test_help_shows_no_python_type_metavars(command):
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output and "list[" not in result.output


def test_help_lists_the_choices():
    run_help = runner.invoke(app, ["run", "--help"]).output
    assert "<quick|full>" in run_help
    bench_help = runner.invoke(app, ["bench", "--help"]).output
    assert "<auto|bf16|f32|int8|fp8>" in bench_help and "<bf16|int8|fp8>" in bench_help
    assert "<v5e|v6e|v5p|v7|h100|h200>" in runner.invoke(app, ["roofline", "--help"]).output
