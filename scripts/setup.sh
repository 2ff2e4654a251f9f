#!/usr/bin/env bash
# Create .venv and install claimbench into it.
#   bash scripts/setup.sh        what running claims needs
#   bash scripts/setup.sh test   plus the test suite's extras (pytest, ruff, torch, transformers,
#                                libtpu for tpu-check)
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "claimbench needs Python >= 3.11; set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
TORCH=torch==2.13.0
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu

case "${1:-}" in
  test)
    # torch goes in first, as the CPU-only build: PyPI's Linux x86_64 wheel of this version
    # pulls in the CUDA runtime, cuDNN, NCCL and Triton (several GB). The CPU build lives on
    # PyTorch's own index; PyPI stays an extra index for torch's dependencies. Where that index
    # cannot be reached (an offline mirror) the first try fails fast and the plain pin is
    # taken; check_torch_cpu.py below fails the set-up if that brought CUDA.
    if ! "${pip[@]}" --timeout 10 --retries 0 --index-url "$TORCH_CPU_INDEX" \
        --extra-index-url https://pypi.org/simple "$TORCH" 2>/dev/null; then
      echo "PyTorch's CPU index is unreachable: installing $TORCH from the configured index" >&2
      "${pip[@]}" "$TORCH"
    fi
    # The tpu extra (libtpu) lets the tests compile the engine step for TPU chips (tpu-check).
    "${pip[@]}" -e ".[test,tpu]"
    .venv/bin/python scripts/check_torch_cpu.py
    ;;
  "")
    "${pip[@]}" -e .
    ;;
  *)
    echo "usage: bash scripts/setup.sh [test]" >&2
    exit 2
    ;;
esac

# Build the native CPU decode kernel now rather than on first use (falls back to XLA).
.venv/bin/python -m claimbench.kernels.native.build
