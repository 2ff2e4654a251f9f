"""claimbench as `bash scripts/setup.sh` installs it, without any extra: the README's quick start.

The test environment has every extra, so tests/base_install.py makes unimportable every module
that a base install would not have (computed from the installed requirements), then drives the
CLI. Until this test, `claimbench` itself failed to start on a base install: the serve command's
module imported starlette (the serve extra's) through serving/api/limits.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from claimbench.cli.extras import EXTRA_MODULES
from claimbench.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "base_install.py"


def base(*args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu", "HOME": str(Path.home())},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def command_paths(group=None, prefix=()) -> list[list[str]]:
    """Every command and subcommand of the CLI, as argument lists."""
    group = group or typer.main.get_command(app)
    paths = []
    for name, command in group.commands.items():
        paths.append([*prefix, name])
        if hasattr(command, "commands"):
            paths.extend(command_paths(command, (*prefix, name)))
    return paths


@pytest.fixture(scope="module")
def runs() -> dict:
    helps = [[*path, "--help"] for path in command_paths()]
    extras = [
        ["serve"],
        ["mcp"],
        ["bench", "--url", "http://127.0.0.1:9", "--requests", "1"],
        ["list"],
        ["show", "kv-int8"],
        ["--help"],
    ]
    report = base(json.dumps(helps + extras))
    return {" ".join(r["args"]): r for r in report["runs"]}


@pytest.mark.slow
def test_the_extras_are_blocked_and_the_base_is_not():
    report = base("--import", "jax", "flax", "pandas", "typer", "fastapi", "starlette", "mcp")
    imports = report["imports"]
    assert all(imports[m] is None for m in ("jax", "flax", "pandas", "typer")), imports
    assert all("not in a base install" in imports[m] for m in ("fastapi", "starlette", "mcp"))
    for extra in ("serve", "ops"):  # (tokenizers brings the fetch extra's huggingface_hub)
        assert set(EXTRA_MODULES[extra]) & set(report["blocked"]), extra


@pytest.mark.slow
def test_every_command_starts_without_the_extras(runs):
    paths = command_paths()
    assert len(paths) >= 20 and ["serve"] in paths and ["mcp"] in paths
    for path in paths:
        run = runs[" ".join([*path, "--help"])]
        assert run["exit_code"] == 0 and run["exception"] is None, run
    assert runs["list"]["exit_code"] == 0 and "kv-int8" in runs["list"]["output"]
    assert runs["show kv-int8"]["exit_code"] == 0, runs["show kv-int8"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, extra",
    [
        ("serve", "serve"),
        ("mcp", "ops"),
        ("bench --url http://127.0.0.1:9 --requests 1", "serve"),
    ],
)
def test_a_command_that_needs_an_extra_names_it(runs, args, extra):
    run = runs[args]
    assert run["exit_code"] == 2 and run["exception"] is None, run
    lines = run["output"].strip().splitlines()
    assert len(lines) == 1 and f"pip install 'claimbench[{extra}]'" in lines[0], lines


@pytest.mark.slow
def test_every_experiment_imports_without_the_extras():
    names = [f"experiments.{p.stem}" for p in sorted((ROOT / "experiments").glob("[a-z]*.py"))]
    assert len(names) >= 27
    # The nightly (scripts/nightly.sh) runs the vLLM comparison on claimbench with the tpu and
    # fetch extras only.
    names.append("benchmarks.engine_vs_vllm")
    imports = base("--import", *names)["imports"]
    assert {m: e for m, e in imports.items() if e is not None} == {}
