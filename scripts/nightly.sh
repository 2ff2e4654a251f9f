#!/usr/bin/env bash
# The nightly job (.github/workflows/nightly-tpu.yml runs it on a TPU VM): set up, print the
# environment, compile-check the TPU path (one chip and a tp=4 slice, every bucket; every
# claim's engines), run the claims, score them, measure vLLM (tpu-inference) beside our
# engine, build the site and, on a TPU in CI, append the new runs and peer results to the
# `results` branch. The workflow uploads the runs as
# an artifact, deploys site/ to GitHub Pages and opens an issue when this fails.
#
#   scripts/nightly.sh [--profile full|quick] [--claims ID,ID] [--chip v5e|v6e]
#                      [--results-dir DIR] [--site-dir DIR] [--skip-setup]
#
# Off a TPU it still runs end to end (tpu-check compiles through libtpu on any host); the
# steps that only mean something on a TPU VM are skipped, and it says so.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=full
claims=""
chip=v6e
results_dir=results
site_dir=site
setup=1
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=$2; shift 2 ;;
    --claims) claims=$2; shift 2 ;;
    --chip) chip=$2; shift 2 ;;
    --results-dir) results_dir=$2; shift 2 ;;
    --site-dir) site_dir=$2; shift 2 ;;
    --skip-setup) setup=0; shift ;;
    *) echo "nightly.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

step() { echo; echo "== nightly: $* =="; }

if [ "$setup" -eq 1 ]; then
  step "set-up"
  bash scripts/setup.sh
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[tpu,fetch]"
fi
cb=(.venv/bin/claimbench)

step "environment"
"${cb[@]}" env
platform=$(.venv/bin/python -c 'import jax; print(jax.default_backend())')

step "tpu-check --chip $chip"
if [ "$profile" = full ]; then
  "${cb[@]}" tpu-check --chip "$chip" --profile full
  # A 4-chip slice of the same model, the shipped MoE, and each engine every claim builds at
  # the full profile: found problems are reported (and annotated on the workflow run), but
  # do not keep the night's claims from running.
  for check in "--profile full --tp 4" "--model claimbench-tiny-moe" "--profile full --claims all"; do
    # shellcheck disable=SC2086  # the words of $check are separate options
    if ! "${cb[@]}" tpu-check --chip "$chip" $check; then
      echo "::warning title=tpu-check::tpu-check --chip $chip $check found problems (see the log)"
    fi
  done
else
  # Quick: the shipped model at the smallest bucket, enough to catch a kernel that no longer
  # compiles for the chip.
  "${cb[@]}" tpu-check --chip "$chip" --profile quick --buckets 16x8
fi

step "budget"
on_ci_tpu=0
if [ "$platform" = tpu ] && [ -n "${GITHUB_ACTIONS:-}" ]; then on_ci_tpu=1; fi
ledger="$results_dir/ledger.parquet"
if [ "$on_ci_tpu" -eq 1 ] && [ ! -e "$ledger" ] && git fetch --quiet origin results \
    && git cat-file -e FETCH_HEAD:results/ledger.parquet 2>/dev/null; then
  # Spend accumulates over nights: a fresh VM starts from the results branch's ledger.
  mkdir -p "$results_dir"
  git show FETCH_HEAD:results/ledger.parquet >"$ledger.fetched"
  mv "$ledger.fetched" "$ledger"
  echo "ledger restored from the results branch"
fi
"${cb[@]}" budget --results-dir "$results_dir"

model_args=()
if [ "$profile" = full ]; then
  step "model fetch (claims.yaml full_profile.model)"
  model_dir=$("${cb[@]}" model fetch --json | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["path"])')
  echo "serving $model_dir"
  model_args=(--model "$model_dir")
  # The drafts the speculative claims pin (their draft_model param), fetched and checked the
  # same way; a run loads each from where the fetch puts it.
  drafts=$(.venv/bin/python -c 'from pathlib import Path
from claimbench.cli.project import open_claims
from claimbench.lab.draft_models import claim_draft_pins
print(" ".join(sorted({p.repo for p in claim_draft_pins(open_claims(Path(".")))})))')
  for draft in $drafts; do
    step "model fetch $draft (a speculative claim's draft)"
    "${cb[@]}" model fetch "$draft"
  done
fi

step "run --profile $profile"
run_args=(--profile "$profile" --results-dir "$results_dir")
if [ -n "$claims" ]; then
  IFS=, read -ra ids <<<"$claims"
  for id in "${ids[@]}"; do run_args+=(--claim "$id"); done
else
  run_args+=(--all)
fi
# run refuses work whose estimated cost exceeds the remaining budget (exit 2).
"${cb[@]}" "${model_args[@]}" run "${run_args[@]}"

step "score"
"${cb[@]}" score --results-dir "$results_dir"

step "peer: vLLM (tpu-inference)"
# vLLM on TPU in its own environment, on the same checkpoint and workload as our engine;
# the result (or why there is none) goes to $results_dir/peers/ for the scoreboard's
# headline row. A peer that does not install or run costs the night nothing else.
if [ "$platform" != tpu ]; then
  echo "skipped: vLLM (tpu-inference) runs only on a TPU VM (platform $platform); peer not measured"
elif [ "$profile" != full ]; then
  echo "skipped: the peer comparison serves the full profile's model (profile $profile)"
else
  vllm_venv=${VLLM_VENV:-../vllm-tpu-venv}
  setup_log=$(mktemp)
  bench=(.venv/bin/python benchmarks/engine_vs_vllm.py --store "$results_dir")
  if ! bash scripts/setup_vllm.sh --tpu "$vllm_venv" >"$setup_log" 2>&1; then
    reason="vllm-tpu did not install: $(tail -n 1 "$setup_log")"
    echo "peer not measured: $reason"
    "${bench[@]}" --not-measured "$reason" || echo "could not record it either"
  elif ! "${bench[@]}" --model "$model_dir" --dtype bfloat16 \
      --vllm-python "$vllm_venv/bin/python" --vllm-log "$results_dir/vllm.log"; then
    echo "peer not measured: the comparison failed (the reason is stored in $results_dir/peers)"
  fi
  rm -f "$setup_log"
fi

step "site"
"${cb[@]}" site --results-dir "$results_dir" --out "$site_dir"

step "results branch"
if [ "$platform" != tpu ] || [ -z "${GITHUB_ACTIONS:-}" ]; then
  echo "skipped: appending to the results branch happens on a TPU VM in CI (platform $platform)"
else
  # Append-only: runs are copied into the branch's results/runs/, never overwritten.
  worktree=$(mktemp -d)
  if git fetch --quiet origin results; then
    git worktree add --quiet "$worktree" FETCH_HEAD
  else
    git worktree add --quiet --detach "$worktree"
    git -C "$worktree" checkout --quiet --orphan results
    git -C "$worktree" rm -rf --quiet .
  fi
  mkdir -p "$worktree/results/runs" "$worktree/results/peers"
  cp -rn "$results_dir"/runs/. "$worktree/results/runs/"
  if [ -d "$results_dir/peers" ]; then cp -rn "$results_dir"/peers/. "$worktree/results/peers/"; fi
  # The local ledger started from the branch's and was only appended to: a superset of it.
  if [ -e "$ledger" ]; then cp "$ledger" "$worktree/results/ledger.parquet"; fi
  git -C "$worktree" add results
  if git -C "$worktree" diff --cached --quiet; then
    echo "no new runs"
  else
    git -C "$worktree" -c user.name=claimbench-nightly -c user.email=nightly@claimbench \
      commit --quiet -m "nightly $(date -u +%F) on $chip ($profile)"
    git -C "$worktree" push --quiet origin HEAD:refs/heads/results
  fi
  git worktree remove --force "$worktree"
fi

step "done"
echo "runs in $results_dir/runs, site in $site_dir/index.html"
