#!/usr/bin/env bash
# Create .venv and install claimbench into it.
#   bash scripts/setup.sh        what running claims needs
#   bash scripts/setup.sh test   plus the test suite's extras (pytest, ruff, torch, transformers)
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

case "${1:-}" in
  test)
    # torch goes in first, pinned: pulled in later as a dependency of the test extras, pip
    # would be free to pick a CUDA build several gigabytes large.
    "${pip[@]}" torch==2.13.0
    "${pip[@]}" -e ".[test]"
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
