"""The CLI leaves the TPU platform out of JAX_PLATFORMS off a TPU host, and only there."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from claimbench.platform import jax_platforms


def test_platforms_by_host():
    assert jax_platforms.default_platforms(tpu=True, cuda=False) is None
    assert jax_platforms.default_platforms(tpu=True, cuda=True) is None
    assert jax_platforms.default_platforms(tpu=False, cuda=False) == "cpu"
    assert jax_platforms.default_platforms(tpu=False, cuda=True) == "cuda,cpu"


def test_tpu_device_nodes_are_detected(tmp_path):
    (tmp_path / "dev").mkdir()
    globs = ((str(tmp_path / "dev"), "accel*"),)
    assert not jax_platforms.tpu_attached(globs)
    (tmp_path / "dev" / "accel0").touch()
    assert jax_platforms.tpu_attached(globs)


def test_a_users_setting_is_kept(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    jax_platforms.set_default_jax_platforms()
    assert os.environ["JAX_PLATFORMS"] == "tpu"


@pytest.mark.slow
def test_jax_imported_first_still_leaves_tpu_out():
    """A script that imports jax before setting the default (JAX reads JAX_PLATFORMS at its
    import) still starts only the host's platforms."""
    code = (
        "import os, jax\n"
        "from claimbench.platform import jax_platforms as jp\n"
        "jp.set_default_jax_platforms()\n"
        "print(jax.config.jax_platforms, os.environ.get('JAX_PLATFORMS'), jp.tpu_attached())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    configured, chosen, tpu = out.stdout.split()
    if tpu == "True":  # a TPU host: left to JAX's own choice
        assert (configured, chosen) == ("None", "None")
    else:
        assert configured == chosen and "tpu" not in configured  # "cpu" or "cuda,cpu"
