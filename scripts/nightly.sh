#!/usr/bin/env bash
# The nightly job (.github/workflows/nightly-tpu.yml runs it on a TPU VM): set up, print the
# environment, compile-check the TPU path (one chip and a tp=4 slice, every bucket; every
# claim's engines), run the claims, score them, measure vLLM (tpu-inference) beside our
# engine, build the site and, on an accelerator in CI, append the new runs, peer results and
# ledger rows to the `results` branch (scripts/push_results.sh: several runners of the matrix
# push at once, a rejected push is made again). The workflow uploads the runs as an artifact,
# and its publish job builds the site from the whole branch, deploys it and opens an issue when
# a night fails, a verdict flips or the engine regresses.
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
on_ci_accelerator=0
if [ "$platform" != cpu ] && [ -n "${GITHUB_ACTIONS:-}" ]; then on_ci_accelerator=1; fi
if [ "$on_ci_accelerator" -eq 1 ] && git fetch --quiet origin results; then
  # Spend accumulates over nights and runners: a fresh VM starts from the results branch's
  # ledger, every row file of it (and the single file of earlier nights), each written once.
  restored=0
  while IFS= read -r path; do
    local_path="$results_dir/${path#results/}"
    if [ ! -e "$local_path" ]; then
      mkdir -p "$(dirname "$local_path")"
      git show "FETCH_HEAD:$path" >"$local_path.fetched"
      mv "$local_path.fetched" "$local_path"
      restored=$((restored + 1))
    fi
  done < <(git ls-tree -r --name-only FETCH_HEAD -- results/ledger results/ledger.parquet)
  echo "ledger: $restored file(s) restored from the results branch"
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
from claimbench.lab.speculative.draft_models import claim_draft_pins
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
if [ "$on_ci_accelerator" -ne 1 ]; then
  echo "skipped: appending to the results branch happens on an accelerator in CI (platform $platform)"
else
  # Append-only: new runs, peer records and ledger files are copied in, never overwritten;
  # a push rejected because another runner pushed first is made again on the new tip.
  bash scripts/push_results.sh --results-dir "$results_dir" \
    --message "nightly $(date -u +%F) on ${RUNNER_LABEL:-$platform} ($profile)"
fi

step "done"
echo "runs in $results_dir/runs, site in $site_dir/index.html"
