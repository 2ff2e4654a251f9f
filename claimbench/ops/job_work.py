"""The long work behind MCP jobs, run in a worker process (ops/worker.py): claim runs, a TPU
compile check, warming the compilation cache. Each is the library calls `claimbench run`,
`tpu-check` and an engine's precompile make, reporting progress through ``emit``."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Emit = Callable[[dict[str, Any]], None]


def run_claims(spec: dict[str, Any], emit: Emit) -> dict[str, Any]:
    """Run each claim of ``spec["claims"]`` as `claimbench run` does (ledger.run_claims): the
    budget gate first (refusing, never overriding) under the store's metered-run lock on a
    metered machine (held until the worker exits), then each run stored atomically, appended
    to the ledger and its compiled programs released before the next claim. A failed claim is
    reported and the next one runs; Ctrl-C (cancel) stores nothing more."""
    from claimbench.harness.claims import find_claim, load_claims
    from claimbench.ledger import metered_lock
    from claimbench.ledger import run_claims as batch
    from claimbench.ops import service

    root, store = Path(spec["root"]), Path(spec["results_dir"])
    claims = load_claims(root)
    selected = [find_claim(claims, claim_id) for claim_id in spec["claims"]]
    profile, trials = spec["profile"], spec["trials"]
    # The metered-run lock the server took and handed down, held until this process exits;
    # a worker started without one takes it itself once the plan says the run is metered.
    lock_fd = spec.get("metered_lock_fd")
    if lock_fd is not None:
        metered_lock.adopt(lock_fd)
    # Again here, not only when the job was accepted: another job may have spent since.
    plan = service.spend_plan(root, store, selected, profile, trials)
    if plan.blocked is None and plan.metered and lock_fd is None:
        lock_fd = metered_lock.hold(store)
        plan = service.spend_plan(root, store, selected, profile, trials)
    if plan.blocked is not None:
        raise ValueError(plan.blocked)
    stored: list[dict[str, Any]] = []
    failed: list[dict[str, str]] = []
    started = 0

    def on_start(claim) -> batch.Progress:
        nonlocal started
        started += 1

        def on_progress(completed: int, total: int, index: int = started) -> None:
            emit(
                {
                    "event": "progress",
                    "claim": claim.id,
                    "claim_index": index,
                    "num_claims": len(selected),
                    "trial": completed,
                    "num_trials": total,
                }
            )

        return on_progress

    def on_outcome(outcome: batch.Outcome) -> None:
        if outcome.run_dir is None:
            failed.append({"claim": outcome.claim_id, "error": f"not stored: {outcome.error}"})
            return
        if outcome.error is not None:
            error = f"stored, not in the ledger: {outcome.error}"
            failed.append({"claim": outcome.claim_id, "error": error})
        stored.append({"claim": outcome.claim_id, "run_id": outcome.run_dir.name})
        emit({"event": "stored", "claim": outcome.claim_id, "run_id": outcome.run_dir.name})

    batch.run_claims(
        selected,
        root=root,
        store=store,
        price=plan.price,
        profile=profile,
        trials=trials,
        seed=spec["seed"],
        dtype=spec["dtype"],
        model_option=Path(spec["model"]) if spec["model"] else None,
        on_start=on_start,
        on_outcome=on_outcome,
    )
    return {"stored": stored, "failed": failed, "usd_per_hour": plan.price.usd_per_hour}


def tpu_check(spec: dict[str, Any], emit: Emit) -> dict[str, Any]:
    """`claimbench tpu-check` for one engine: the compile report, per bucket."""
    from claimbench.tpucheck.setup import check_setup
    from claimbench.tpucompile import check

    setup = check_setup(
        Path(spec["root"]),
        spec["profile"],
        tp=spec["tp"],
        buckets=spec["buckets"],
        weights=spec["weights"],
        kv_dtype=spec["kv_dtype"],
    )
    report = check.check(
        spec["chip"],
        setup.model_cfg,
        setup.engine_cfg,
        model_name=setup.model_name,
        buckets=setup.buckets,
    )
    return {"ok": report.ok, "report": report.to_json()}


def warm_cache(spec: dict[str, Any], emit: Emit) -> dict[str, Any]:
    """Compile every bucket of the served engine (the configured model and dtype, the sizes
    ``spec["engine"]`` names) into the persistent compilation cache experiments share."""
    from claimbench.engine.build import build_engine
    from claimbench.engine.config import EngineConfig
    from claimbench.harness.context import COMPILE_CACHE_DIR

    def num_entries() -> int:
        return sum(1 for _ in COMPILE_CACHE_DIR.iterdir()) if COMPILE_CACHE_DIR.is_dir() else 0

    before = num_entries()
    t0 = time.perf_counter()
    engine = build_engine(
        EngineConfig(
            model_path=Path(spec["model"]) if spec["model"] else None,
            dtype=spec["dtype"],
            compilation_cache_dir=COMPILE_CACHE_DIR,
            **spec["engine"],
        )
    )
    num_buckets, compile_s = engine.precompile()
    return {
        "num_buckets": num_buckets,
        "compile_s": compile_s,
        "wall_s": time.perf_counter() - t0,
        "cache_dir": str(COMPILE_CACHE_DIR),
        "cache_entries_before": before,
        "cache_entries_after": num_entries(),
    }


WORK: dict[str, Callable[[dict[str, Any], Emit], dict[str, Any]]] = {
    "run_claims": run_claims,
    "tpu_check": tpu_check,
    "warm_cache": warm_cache,
}
