"""Our engine on two paths of one kernel choice, rounds alternating in one process: the
engine-level half of benchmarks/dense_matmul.py (the matmuls) and native_sampler.py (the
sampler's reductions). Each path gets its own engine, built with the environment variable
that forces it (and checked against the runner's own account of what it took), one untimed
round each, then ``rounds`` rounds alternating so the host's drift lands on both."""

from __future__ import annotations

import os
import statistics

PATHS = ("native", "xla")


def engine_rounds(rounds: int, workload: list[str], env: str, describe_key: str) -> dict:
    """tok/s, median prefill and decode step (ms) and idle core fraction per round on each
    path of ``env`` (the runner's describe()[describe_key] names the one it took); medians,
    native / xla tok/s, and how many greedy outputs the two paths give identically."""
    import engine_vs_vllm as ev

    from claimbench.engine.sampling_params import SamplingParams

    args, job = ev.ours_only(workload)
    engines = {}
    for path in PATHS:
        os.environ[env] = path
        engines[path] = ev.build_ours(args, job)
        if engines[path].runner.describe()[describe_key] != path:
            raise SystemExit(f"the {path} {describe_key} is not available here")
        ev.ours_round(engines[path], job)  # untimed
    os.environ.pop(env)
    results: dict[str, dict[str, list[float]]] = {
        name: {"tok_s": [], "prefill_ms": [], "decode_ms": [], "idle": []} for name in engines
    }
    for _ in range(rounds):
        for name, engine in engines.items():
            records: list = []
            out = ev.ours_round(engine, job, records)
            r = results[name]
            r["tok_s"].append(out["output_tokens"] / out["elapsed_s"])
            r["prefill_ms"].append(
                1e3 * statistics.median(s.device_s for s in records if s.num_prefill_tokens)
            )
            r["decode_ms"].append(
                1e3 * statistics.median(s.device_s for s in records if not s.num_prefill_tokens)
            )
            r["idle"].append(out["idle_core_frac"])
    greedy = SamplingParams(max_tokens=args.output_len, ignore_eos=True)
    outputs = {name: e.generate(job.prompts, greedy) for name, e in engines.items()}
    identical = sum(
        a.token_ids == b.token_ids for a, b in zip(outputs["native"], outputs["xla"], strict=True)
    )
    med = {name: {k: statistics.median(v) for k, v in r.items()} for name, r in results.items()}
    return {
        "rounds": results,
        "median": med,
        "ratio_tok_s": med["native"]["tok_s"] / med["xla"]["tok_s"],
        "identical_outputs": f"{identical}/{len(job.prompts)}",
    }
