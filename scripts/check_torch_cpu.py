"""Check that the test set-up took torch's CPU-only build: no CUDA runtime packages, no Triton.

Run by ``scripts/setup.sh test`` with the venv's Python; prints one line and exits 1 otherwise.
On Linux x86_64 the PyPI wheel of torch depends on nvidia-* CUDA packages and triton (several
GB); the CPU build, from PyTorch's CPU wheel index, depends on neither.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from importlib import metadata

# Distributions only a CUDA (or ROCm) build of torch pulls in.
GPU_ONLY_PREFIXES = ("nvidia-", "triton", "pytorch-triton")


def gpu_packages(installed: Iterable[str]) -> list[str]:
    """The installed distributions (names as pip lists them) that a CPU-only torch never needs."""
    names = {name.lower().replace("_", "-") for name in installed}
    return sorted(n for n in names if n.startswith(GPU_ONLY_PREFIXES))


def problem(installed: Iterable[str], torch_cuda: str | None) -> str | None:
    """Why this environment is not CPU-only torch (one line), or None if it is."""
    extra = gpu_packages(installed)
    if extra:
        shown = ", ".join(extra[:4]) + (f" and {len(extra) - 4} more" if len(extra) > 4 else "")
        return f"torch's CUDA build was installed ({shown}); the test set-up needs the CPU build"
    if torch_cuda is not None:
        return f"torch is built for CUDA {torch_cuda}; the test set-up needs the CPU build"
    return None


def main() -> int:
    """Check the running interpreter's environment; 0 if CPU-only, else 1 with one line."""
    import torch

    installed = [d.metadata["Name"] for d in metadata.distributions() if d.metadata["Name"]]
    reason = problem(installed, torch.version.cuda)
    if reason is not None:
        print(f"error: {reason}", file=sys.stderr)
        return 1
    print(f"torch {torch.__version__}: CPU-only build")
    return 0


if __name__ == "__main__":
    sys.exit(main())
