"""The CLI leaves the TPU platform out of JAX_PLATFORMS off a TPU host, and only there."""

from __future__ import annotations

from claimbench.cli import jax_platforms


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
    import os

    assert os.environ["JAX_PLATFORMS"] == "tpu"
