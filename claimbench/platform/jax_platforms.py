"""Which JAX platforms the CLI initializes when the user has not said (JAX_PLATFORMS unset).

The test set-up installs libtpu (for `tpu-check`'s ahead-of-time TPU compiles). With libtpu
present JAX also tries to start a TPU runtime on a machine that has no TPU: it prints libtpu's
initialization errors on every command and takes libtpu's process lock, so a second JAX
process (a cold-start probe, say) collides with the first. Off a TPU host the TPU platform is
therefore left out; `tpu-check` compiles through libtpu's topology API, which needs no runtime.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

# Device nodes a TPU VM exposes: /dev/accel* (v2-v5e) or /dev/vfio/<n> (v5p, v6e and later).
_TPU_DEVICE_GLOBS = (("/dev", "accel*"), ("/dev/vfio", "[0-9]*"))
_CUDA_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin")


def tpu_attached(device_globs: tuple[tuple[str, str], ...] = _TPU_DEVICE_GLOBS) -> bool:
    """Whether this host has TPU device nodes."""
    return any(any(Path(root).glob(pattern)) for root, pattern in device_globs)


def default_platforms(*, tpu: bool, cuda: bool) -> str | None:
    """JAX_PLATFORMS for a host: None (JAX's own choice) on a TPU host, else without tpu."""
    if tpu:
        return None
    return "cuda,cpu" if cuda else "cpu"


def set_default_jax_platforms() -> None:
    """Set JAX_PLATFORMS from this host's hardware unless the user set it. JAX reads the
    variable when it is imported, so where it already is (a benchmark script that imports it
    first) its config is set too: either way before its first backend starts."""
    if "JAX_PLATFORMS" in os.environ:
        return
    cuda = any(importlib.util.find_spec(name) is not None for name in _CUDA_PLUGINS)
    platforms = default_platforms(tpu=tpu_attached(), cuda=cuda)
    if platforms is not None:
        os.environ["JAX_PLATFORMS"] = platforms
        if "jax" in sys.modules:
            sys.modules["jax"].config.update("jax_platforms", platforms)
