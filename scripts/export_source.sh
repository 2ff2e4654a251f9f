#!/usr/bin/env bash
# Export the committed source (HEAD) to DEST for a machine that gets a copy without .git (an
# accelerator host): the code, claims.yaml and the shipped models, not results/ or site/. The
# commit goes to DEST/SOURCE_COMMIT, which runs made from the export record as their git sha.
set -euo pipefail
dest=${1:?usage: scripts/export_source.sh DEST}
cd "$(dirname "$0")/.."
sha=$(git rev-parse HEAD)
rm -rf "$dest"
mkdir -p "$dest"
git archive --format=tar HEAD -- . ':!results' ':!site' | tar -x -C "$dest"
echo "$sha" >"$dest/SOURCE_COMMIT"
echo "exported $sha to $dest"
