#!/usr/bin/env bash
# Append a results store's new runs, peer records and ledger row files to the `results` branch
# of a remote, from the git repository in the current directory (scripts/nightly.sh calls it on
# each runner of the nightly matrix).
#
#   scripts/push_results.sh --results-dir DIR --message TEXT [--remote origin]
#                           [--branch results] [--retries 8]
#
# Several runners push to one branch at once, so a push may be rejected: the branch moved since
# this runner fetched it. Then the commit is made again on the new tip and pushed again, up to
# --retries times. Nothing is ever overwritten, so remaking the commit cannot lose anything:
# run directories and peer records are immutable and new ones are copied in only where the
# branch lacks them (cp -n), and the ledger is one file per append (claimbench/ledger/ledger.py),
# so two runners' rows are different files, never one file rewritten twice.
set -euo pipefail

results_dir=""
message=""
remote=origin
branch=results
retries=8
while [ $# -gt 0 ]; do
  case "$1" in
    --results-dir) results_dir=$2; shift 2 ;;
    --message) message=$2; shift 2 ;;
    --remote) remote=$2; shift 2 ;;
    --branch) branch=$2; shift 2 ;;
    --retries) retries=$2; shift 2 ;;
    *) echo "push_results.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$results_dir" ] || [ -z "$message" ]; then
  echo "push_results.sh: --results-dir and --message are required" >&2
  exit 2
fi
if [ ! -d "$results_dir" ]; then
  echo "push_results.sh: --results-dir $results_dir is not a directory" >&2
  exit 2
fi
results_dir=$(cd "$results_dir" && pwd)

REJECTED=75  # attempt's status when the remote refused the push
# One attempt: a fresh worktree at the branch's tip (or a new root commit when the remote has
# no such branch yet), this store's new files copied in, one commit, one push. Status 0: pushed
# or nothing new; REJECTED: the push was refused; anything else: an error.
attempt() {
  local worktree orphan=""
  worktree=$(mktemp -d)
  if git fetch --quiet "$remote" "$branch" 2>/dev/null; then
    git worktree add --quiet --detach "$worktree" FETCH_HEAD
  else
    # A local branch name only for the root commit's sake, unique so that an earlier attempt's
    # cannot be in the way; deleted below.
    orphan="push-results-$$-$RANDOM"
    git worktree add --quiet --detach "$worktree"
    git -C "$worktree" checkout --quiet --orphan "$orphan"
    git -C "$worktree" rm -rf --quiet .
  fi
  local dest="$worktree/results" sub
  mkdir -p "$dest"
  for sub in runs peers ledger; do
    if [ -d "$results_dir/$sub" ]; then
      mkdir -p "$dest/$sub"
      cp -rn "$results_dir/$sub/." "$dest/$sub/"
    fi
  done
  # Leftovers of an interrupted write are not results.
  find "$dest" -name '.tmp-*' -prune -exec rm -rf {} + 2>/dev/null || true
  git -C "$worktree" add results
  local status=0
  if git -C "$worktree" diff --cached --quiet; then
    echo "no new results"
  else
    git -C "$worktree" -c user.name=claimbench-nightly -c user.email=nightly@claimbench \
      commit --quiet -m "$message"
    if git -C "$worktree" push --quiet "$remote" "HEAD:refs/heads/$branch"; then
      echo "pushed to $branch"
    else
      status=$REJECTED
    fi
  fi
  git worktree remove --force "$worktree"
  # (a root commit never made leaves no branch to delete)
  if [ -n "$orphan" ]; then git branch --quiet -D "$orphan" 2>/dev/null || true; fi
  return "$status"
}

for ((n = 1; n <= retries; n++)); do
  # In a subshell outside any condition or || list (where bash ignores set -e), so that the
  # attempt stops at its first error.
  set +e
  (
    set -e
    attempt
  )
  status=$?
  set -e
  if [ "$status" -eq 0 ]; then
    exit 0
  elif [ "$status" -ne "$REJECTED" ]; then
    echo "push_results.sh: failed (status $status) before any push" >&2
    exit "$status"
  fi
  echo "push to $branch rejected (attempt $n of $retries): the branch moved; fetching it again"
  # A random pause, so runners that collided do not collide again in step.
  sleep "$((RANDOM % 3)).$((RANDOM % 10))"
done
echo "push_results.sh: $branch still rejected the push after $retries attempts" >&2
exit 1
