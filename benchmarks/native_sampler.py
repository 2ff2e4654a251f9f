"""The sampler's greedy reductions by the native kernel beside XLA's, side by side in one run.

Each step the sampler takes every row's greedy token and log-sum-exp (engine/worker/sampler.py).
XLA:CPU runs them as separate reductions on one thread; kernels/native_greedy.py does both in
one call on the kernels' threads. Two measures, each alternating the two paths:

- the sampler alone, jitted, on greedy rows of random logits: ``--rows`` x the shipped model's
  vocabulary (a decode step's sampled rows);
- with ``--engine-rounds N``, two engines in one process (the native reductions and XLA's,
  ``CLAIMBENCH_NATIVE_SAMPLER``) take turns on engine_vs_vllm.py's workload: output tokens/s,
  the median device time of decode steps, and whether their greedy outputs are identical.

    .venv/bin/python benchmarks/native_sampler.py --engine-rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from path_rounds import engine_rounds  # noqa: E402

PATHS = ("native", "xla")


def time_sampler(rows: int, vocab: int, repeats: int, iters: int) -> dict:
    """Median ms a call of the jitted sampler on ``rows`` greedy rows, each path, alternating."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from claimbench.engine.worker.sampler import SamplingBatch, sample

    logits = jnp.asarray(np.random.default_rng(0).standard_normal((rows, vocab), np.float32))
    batch = SamplingBatch(
        temperature=jnp.zeros(rows),
        top_k=jnp.zeros(rows, jnp.int32),
        top_p=jnp.ones(rows),
        seeds=jnp.zeros(rows, jnp.uint32),
        output_index=jnp.zeros(rows, jnp.int32),
        all_greedy=jnp.asarray(True),
    )
    fns = {p: jax.jit(lambda x, b, native=(p == "native"): sample(x, b, native)) for p in PATHS}
    outs = {p: jax.block_until_ready(fn(logits, batch)) for p, fn in fns.items()}
    same_tokens = bool(jnp.all(outs["native"][0] == outs["xla"][0]))
    ms: dict[str, list[float]] = {p: [] for p in PATHS}
    for _ in range(repeats):
        for p, fn in fns.items():
            start = time.perf_counter()
            for _ in range(iters):
                out = fn(logits, batch)
            jax.block_until_ready(out)
            ms[p].append(1e3 * (time.perf_counter() - start) / iters)
    med = {p: statistics.median(v) for p, v in ms.items()}
    return {
        "rows": rows,
        "vocab": vocab,
        "ms": med,
        "ratio": med["xla"] / med["native"],
        "same_tokens": same_tokens,
    }


def main(argv: list[str] | None = None) -> None:
    from claimbench.platform.jax_platforms import set_default_jax_platforms

    set_default_jax_platforms()  # before JAX starts a backend: no TPU runtime off a TPU host
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--engine-rounds", type=int, default=0)
    parser.add_argument(
        "--workload",
        default="",
        help="engine_vs_vllm.py options for the engine rounds, e.g. '--requests 16'",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)

    from claimbench.kernels import native_greedy
    from claimbench.models.checkpoint import default_model_path, read_config

    if (reason := native_greedy.unavailable_reason()) is not None:
        raise SystemExit(f"the native greedy kernel cannot run here: {reason}")
    vocab = read_config(default_model_path()).vocab_size
    report: dict = {"sampler": [], "engine": None}
    for rows in args.rows:
        r = time_sampler(rows, vocab, args.repeats, args.iters)
        report["sampler"].append(r)
        if not args.json:
            print(
                f"sampler, {rows} greedy rows of {vocab}: XLA {r['ms']['xla']:.3f} ms, native "
                f"{r['ms']['native']:.3f} ms: XLA / native {r['ratio']:.2f}x; same tokens: "
                f"{r['same_tokens']}"
            )
    if args.engine_rounds:
        from claimbench.engine.worker.sampler import SAMPLER_ENV

        report["engine"] = engine = engine_rounds(
            args.engine_rounds, args.workload.split(), SAMPLER_ENV, "sampler"
        )
        if not args.json:
            for name, r in engine["rounds"].items():
                rounds = " / ".join(f"{t:,.0f}" for t in r["tok_s"])
                m = engine["median"][name]
                print(
                    f"engine, {name} sampler: {rounds} tok/s; median decode step "
                    f"{m['decode_ms']:.2f} ms, idle cores {m['idle']:.3f}"
                )
            print(
                f"engine native / XLA (medians): {engine['ratio_tok_s']:.3f}x; identical "
                f"greedy outputs: {engine['identical_outputs']}"
            )
    if args.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
