"""scripts/setup.sh test: torch's CPU build first, a fast fall-back, a check that fails on CUDA."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def load_checker():
    spec = importlib.util.spec_from_file_location("check", REPO / "scripts" / "check_torch_cpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("installed", "cuda", "fragment"),
    [
        (["torch", "nvidia-cublas-cu12", "numpy"], None, "CUDA build was installed"),
        (["torch", "nvidia_cudnn_cu12"], None, "nvidia-cudnn-cu12"),
        (["torch", "triton"], None, "triton"),
        (["torch", "numpy"], "12.8", "built for CUDA 12.8"),
    ],
)
def test_cuda_torch_is_a_problem(installed, cuda, fragment):
    reason = load_checker().problem(installed, cuda)
    assert reason is not None and fragment in reason and "\n" not in reason


def test_cpu_torch_is_fine():
    assert load_checker().problem(["torch", "numpy", "jax", "Jinja2"], None) is None


@pytest.mark.slow
def test_this_venv_has_the_cpu_build():
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "check_torch_cpu.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "CPU-only build" in done.stdout


FAKE_PYTHON = """#!/usr/bin/env bash
# Logs each call; pip fails for PyTorch's CPU index when FAKE_CPU_INDEX=down (unreachable).
echo "$*" >> "$FAKE_LOG"
if [ "${FAKE_CPU_INDEX:-up}" = down ] && [[ " $* " == *" --index-url "* ]]; then exit 1; fi
exit 0
"""


@pytest.fixture
def fake_checkout(tmp_path):
    """scripts/setup.sh in a tree whose .venv/bin/python only records how it is called."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return tmp_path


def run_setup(checkout: Path, cpu_index: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = checkout / "calls.log"
    env = os.environ | {
        "PYTHON": str(checkout / ".venv" / "bin" / "python"),
        "FAKE_LOG": str(log),
        "FAKE_CPU_INDEX": cpu_index,
    }
    done = subprocess.run(
        ["bash", str(checkout / "scripts" / "setup.sh"), "test"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return done, log.read_text().splitlines()


def pip_installs(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("-m pip install")]


def test_setup_takes_torch_from_the_cpu_index_first(fake_checkout):
    done, calls = run_setup(fake_checkout, "up")
    assert done.returncode == 0, done.stderr
    first, extras = pip_installs(calls)
    assert first.endswith("torch==2.13.0")
    assert f"--index-url {CPU_INDEX}" in first
    assert "--extra-index-url https://pypi.org/simple" in first
    assert "--retries 0" in first  # unreachable: fail at once, not after pip's retries
    assert extras.endswith("-e .[test,tpu]")
    assert "scripts/check_torch_cpu.py" in calls[-2]  # verified before the native build


def test_setup_falls_back_to_the_plain_pin_when_the_cpu_index_is_down(fake_checkout):
    done, calls = run_setup(fake_checkout, "down")
    assert done.returncode == 0, done.stderr
    first, fallback, extras = pip_installs(calls)
    assert CPU_INDEX in first
    assert fallback.endswith("install --quiet --disable-pip-version-check torch==2.13.0")
    assert "CPU index is unreachable" in done.stderr
    assert "scripts/check_torch_cpu.py" in calls[-2]
