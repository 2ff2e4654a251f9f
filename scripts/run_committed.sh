#!/usr/bin/env bash
# Run claimbench from the committed source (HEAD) and store the runs in this checkout's results/.
#
# A run is scored only if it can be tied to a commit: one made from a tree with uncommitted
# changes under claimbench/, experiments/ or claims.yaml is listed, not scored
# (harness/run_checks.py). While edits are in progress the checkout is such a tree; this exports
# HEAD (scripts/export_source.sh) to a temporary directory, runs there with this checkout's
# Python environment (the export's own package first on the path, not the editable install), and
# passes --results-dir so the runs land here. The export records its commit as SOURCE_COMMIT.
#
#   scripts/run_committed.sh run --all --profile quick
#   scripts/run_committed.sh run --claim kv-int8
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
results=${RESULTS_DIR:-$repo/results}  # where the runs are stored
if [[ ${1:-} != run ]]; then
  echo "usage: scripts/run_committed.sh run [run options]" >&2
  exit 2
fi
dest=$(mktemp -d "${TMPDIR:-/tmp}/claimbench-committed.XXXXXX")
trap 'rm -rf "$dest"' EXIT
"$repo/scripts/export_source.sh" "$dest" >&2
cd "$dest"
PYTHONPATH="$dest" "$python" -m claimbench --root "$dest" "$@" --results-dir "$results"
