#!/usr/bin/env bash
# Run claims' experiments on the accelerator JAX finds (a GPU or TPU host lent for a short
# time), each in its own time box, and store the runs under RESULTS_DIR.
#
#   scripts/accelerator_evidence.sh RESULTS_DIR CLAIM:PROFILE[:TRIALS[:SECONDS]] ...
#
# It needs no install: `python3 -m claimbench` runs from the source tree (PYTHONPATH), such as
# an export made by scripts/export_source.sh, whose SOURCE_COMMIT the runs record. A claim that
# fails or outruns its box (SECONDS, else CLAIM_TIMEOUT_S, default 240 s) is reported and the
# next one runs; the exit status is non-zero if any did. On a CPU-only host it refuses (the
# runs would be CPU evidence from a script meant for accelerators) unless ALLOW_CPU=1.
set -uo pipefail
results_dir=${1:?usage: scripts/accelerator_evidence.sh RESULTS_DIR CLAIM:PROFILE[:TRIALS[:SECONDS]] ...}
shift
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
timeout_s=${CLAIM_TIMEOUT_S:-240}
cb=("$python" -m claimbench)

echo "== environment =="
"${cb[@]}" env || exit 1
backend=$("$python" -c 'from claimbench.platform.jax_platforms import set_default_jax_platforms as s
s()
import jax
print(jax.default_backend())') || exit 1
if [ "$backend" = cpu ] && [ "${ALLOW_CPU:-0}" != 1 ]; then
  echo "accelerator_evidence.sh: JAX found no accelerator (backend cpu); set ALLOW_CPU=1 to run anyway" >&2
  exit 2
fi

failed=()
for spec in "$@"; do
  IFS=: read -r claim profile trials box <<<"$spec"
  box=${box:-$timeout_s}
  args=(run --claim "$claim" --profile "${profile:-quick}" --results-dir "$results_dir")
  [ -n "${trials:-}" ] && args+=(--trials "$trials")
  echo
  echo "== $claim (${profile:-quick}${trials:+, $trials trials}; at most ${box} s) =="
  start=$(date +%s)
  timeout "$box" "${cb[@]}" "${args[@]}"
  status=$?
  echo "-- $claim: exit $status after $(($(date +%s) - start)) s"
  [ "$status" -ne 0 ] && failed+=("$claim")
done

echo
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed or timed out: ${failed[*]}"
  exit 1
fi
echo "all runs stored under $results_dir"
