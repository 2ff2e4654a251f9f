"""What batch-invariant mode costs, and that it holds: two bf16 engines side by side in one run.

    python benchmarks/batch_invariance.py [--rounds 3] [--workload '--requests 16'] [--json]

Two engines in this process over the same checkpoint in bf16, one with ``batch_invariant``
(every matmul through the native f32 kernel) and one without (XLA's bf16 dot), take turns
on benchmarks/engine_vs_vllm.py's workload (held-out prompts, greedy, EOS ignored; its
defaults unless --workload passes other options), --rounds timed rounds each after an
untimed one. Printed per mode: output tokens/s per round, the median TPOT, and the ratios
invariant / default. Then the property itself: the first prompt served alone and then beside
the whole workload, in each mode; whether its greedy tokens and log-probs came out
bit-identical.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = {"default": False, "invariant": True}


def build(job, batch_invariant: bool, page_size: int):
    """The engine_vs_vllm.py engine for ``job``, with ``batch_invariant`` set, precompiled."""
    from claimbench.engine.build import build_engine
    from claimbench.engine.config import EngineConfig
    from claimbench.engine.kv.kv_cache import kv_bytes_per_token, resolve_kv_dtype
    from claimbench.models.checkpoint import load_model
    from claimbench.models.tokenizer import Tokenizer

    model, _ = load_model(Path(job.model), job.dtype)
    per_token = kv_bytes_per_token(model.cfg, resolve_kv_dtype("auto", model.dtype))
    pool = (job.max_num_seqs * (job.max_model_len // page_size + 1) + 1) * page_size * per_token
    config = EngineConfig(
        dtype=job.dtype,
        kv_pool_bytes=pool,
        page_size=page_size,
        max_num_seqs=job.max_num_seqs,
        max_num_batched_tokens=job.max_num_batched_tokens,
        max_model_len=job.max_model_len,
        prefix_caching="off",
        async_scheduling=False,
        seed=job.seed,
        batch_invariant=batch_invariant,
        # Both engines reserve a request's pages up front (the invariant mode needs it): the
        # comparison is the matmul path alone.
        kv_allocation="reserve_request",
    )
    engine = build_engine(config, model=model, tokenizer=Tokenizer.from_dir(Path(job.model)))
    engine.precompile()
    return engine


def alone_vs_beside(engine, job) -> dict[str, bool]:
    """The first prompt alone, then beside every other: tokens and log-probs identical?"""
    from claimbench.engine.sampling_params import SamplingParams

    greedy = SamplingParams(max_tokens=job.output_len, ignore_eos=True, logprobs=True)
    engine.reset()
    alone = engine.generate(job.prompts[:1], greedy)[0]
    engine.reset()
    beside = engine.generate(job.prompts, greedy)[0]
    return {
        "tokens": alone.token_ids == beside.token_ids,
        "logprobs": alone.logprobs == beside.logprobs,
    }


def main(argv: list[str] | None = None) -> None:
    from claimbench.platform.jax_platforms import set_default_jax_platforms

    set_default_jax_platforms()  # before JAX starts a backend: no TPU runtime off a TPU host
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--workload", default="", help="engine_vs_vllm.py options, e.g. '--requests 16'"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)

    import engine_vs_vllm as ev

    wl, job = ev.ours_only(args.workload.split(), dtype="bfloat16")
    engines = {name: build(job, on, wl.page_size) for name, on in MODES.items()}
    for engine in engines.values():
        ev.ours_round(engine, job)  # untimed
    rounds: dict[str, dict[str, list[float]]] = {m: {"tok_s": [], "tpot_ms": []} for m in MODES}
    for _ in range(args.rounds):
        for name, engine in engines.items():
            out = ev.ours_round(engine, job)
            rounds[name]["tok_s"].append(out["output_tokens"] / out["elapsed_s"])
            rounds[name]["tpot_ms"].append(1e3 * statistics.median(out["tpot_s"]))
    med = {m: {k: statistics.median(v) for k, v in r.items()} for m, r in rounds.items()}
    report = {
        "rounds": rounds,
        "median": med,
        "tok_s_invariant_over_default": med["invariant"]["tok_s"] / med["default"]["tok_s"],
        "tpot_invariant_over_default": med["invariant"]["tpot_ms"] / med["default"]["tpot_ms"],
        "identical_alone_vs_beside": {m: alone_vs_beside(e, job) for m, e in engines.items()},
    }
    if args.json:
        print(json.dumps(report))
        return
    for name, r in rounds.items():
        tok_s = " / ".join(f"{t:,.0f}" for t in r["tok_s"])
        print(f"{name}: {tok_s} tok/s; median TPOT {med[name]['tpot_ms']:.2f} ms")
    print(
        f"invariant / default (medians): tok/s {report['tok_s_invariant_over_default']:.2f}x, "
        f"TPOT {report['tpot_invariant_over_default']:.2f}x"
    )
    for name, same in report["identical_alone_vs_beside"].items():
        print(f"{name}: first prompt alone vs beside the workload, identical {same}")


if __name__ == "__main__":
    main()
