"""The native dense kernel on packed weights beside XLA's dot, side by side in one run.

    python benchmarks/dense_matmul.py [--rows 64 2048] [--repeats 5] [--engine-rounds 0] [--json]

Matmuls: the matrices of one step of the model at the checkpoint's shapes, in two groups: the
layers' (each layer's q, k, v, o, gate, up and down projections) and the tied head, each over
--rows rows of f32 activations, jitted as one function per path; the paths alternate --repeats
times, each timed as the median of --iters calls. Printed: milliseconds, GFLOP/s and the ratio
XLA / native per group and row count. The head is timed apart because the engine runs it only
on the rows it samples (a decode step's sequences, a prefill step's finished prompts), never on
a prefill step's 2,048: there its [2048, vocab] output, larger than the caches, ran at 0.35-0.45
of the layers' rate on a 2-core Zen 5 host and pulled a step's figure down with it. Then the
native kernel on each of --threads thread counts (kernels/native_threads.py), one call after
another (round_ceiling.serial_dense), against the host's multiply-add peak on as many threads
(kernels/native_peak.py), the two alternating --repeats times: the kernel's FLOP/s as a fraction
of its own ceiling; and the same with each pass after an untimed read of four times the
last-level cache as sysfs gives it (at least 64 MB: ``evict_bytes``), so that the weights come
from memory, as in the engine's decode steps, where a step's KV read evicts them ("weights from
memory").

Engine (--engine-rounds N): two engines in this process over the same checkpoint, one
serving with the native kernel (``CLAIMBENCH_NATIVE_DENSE=native``), one with XLA's dot,
take turns on benchmarks/engine_vs_vllm.py's workload (its defaults: held-out prompts,
greedy, EOS ignored; --workload passes it other options), N timed rounds each after an
untimed one. Printed: output tokens/s per round, the median step time of steps with
prefill and of decode-only steps, the ratio of the medians, and whether the two engines'
greedy tokens are identical.
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
from round_ceiling import SerialDense  # noqa: E402


def model_matrices(model) -> list[tuple[int, int]]:
    """[(K, N)] of every matmul one step runs, in order (round_ceiling.matmul_shapes)."""
    from round_ceiling import matmul_shapes

    return matmul_shapes(model.cfg)


def time_matmuls(shapes, rows: int, repeats: int, iters: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from claimbench.kernels import native_dense

    rng = np.random.default_rng(0)
    weights = [jnp.asarray(rng.standard_normal(s, np.float32) * 0.05) for s in shapes]
    packed = [native_dense.pack(w) for w in weights]
    inputs = {k: jnp.asarray(rng.standard_normal((rows, k), np.float32)) for k, _ in shapes}

    def xla(xs, ws):
        return [xs[w.shape[0]] @ w for w in ws]

    def native(xs, ps):
        return [native_dense.dense(xs[k], p, n) for (k, n), p in zip(shapes, ps, strict=True)]

    paths = {"xla": (jax.jit(xla), weights), "native": (jax.jit(native), packed)}
    times: dict[str, list[float]] = {name: [] for name in paths}
    for fn, args in paths.values():
        jax.block_until_ready(fn(inputs, args))
    for _ in range(repeats):
        for name, (fn, args) in paths.items():
            samples = []
            for _ in range(iters):
                start = time.perf_counter()
                jax.block_until_ready(fn(inputs, args))
                samples.append(time.perf_counter() - start)
            times[name].append(statistics.median(samples))
    flops = sum(2 * rows * k * n for k, n in shapes)
    ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
    return {
        "rows": rows,
        "ms": ms,
        "gflop_s": {name: flops / (t * 1e6) for name, t in ms.items()},
        "ratio": ms["xla"] / ms["native"],
    }


MIN_EVICT_BYTES = 64 << 20


def evict_bytes() -> int:
    """Bytes to read between passes so that the weights come from memory: four times the
    last-level cache as the kernels' read ceilings take it (native_bandwidth, from sysfs),
    and at least 64 MB. Not ``os.sysconf``: glibc's SC_LEVEL3_CACHE_SIZE is unknown on some
    hosts (a 480 MiB L3 then read as none, and 64 MB left the weights in cache)."""
    from claimbench.kernels.native_bandwidth import last_level_cache_bytes

    return max(MIN_EVICT_BYTES, 4 * last_level_cache_bytes())


def evictor():
    """A callable that reads ``evict_bytes()`` of its own through the caches, as a decode
    step's KV read does between two uses of a layer's weights."""
    import numpy as np

    buffer = np.ones(evict_bytes() // 4, np.float32)
    return lambda: float(buffer.sum())


def against_peak(shapes, rows: int, repeats: int, iters: int, threads: list[int]) -> dict:
    """The native matmuls, one after another, on each of ``threads`` thread counts and the
    multiply-add peak on as many, alternating ``repeats`` times: {threads: {gflop_s,
    peak_gflop_s, fraction, cold_gflop_s, cold_fraction}}. ``cold``: each pass after a read
    of ``evict_bytes()`` (untimed), so that its weights come from memory, as in a decode step
    of the engine, where the step's KV read evicts them."""
    from claimbench.kernels import native_peak, native_threads

    timer = SerialDense(shapes, rows)  # one call at a time
    evict = evictor()
    rates: dict[int, list[float]] = {t: [] for t in threads}
    cold: dict[int, list[float]] = {t: [] for t in threads}
    peaks: dict[int, list[float]] = {t: [] for t in threads}
    for _ in range(repeats):
        for t in threads:
            with native_threads.threads(t):
                rates[t].append(timer.flops / timer.median_s(iters))
                cold[t].append(timer.flops / timer.median_s(iters, before=evict))
            peaks[t].append(native_peak.fma_peak(t))
    out = {}
    for t in threads:
        rate, peak = statistics.median(rates[t]), statistics.median(peaks[t])
        chilled = statistics.median(cold[t])
        out[str(t)] = {
            "gflop_s": rate / 1e9,
            "peak_gflop_s": peak / 1e9,
            "fraction": rate / peak,
            "cold_gflop_s": chilled / 1e9,
            "cold_fraction": chilled / peak,
        }
    return out


def main(argv: list[str] | None = None) -> None:
    from claimbench.platform.jax_platforms import set_default_jax_platforms

    set_default_jax_platforms()  # before JAX starts a backend: no TPU runtime off a TPU host
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[64, 2048])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--engine-rounds", type=int, default=0)
    parser.add_argument(
        "--workload",
        default="",
        help="engine_vs_vllm.py options for the engine rounds, e.g. '--requests 16'",
    )
    parser.add_argument("--model", type=Path, default=None, help="default: the shipped model")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)

    from claimbench.kernels import native_dense
    from claimbench.models.checkpoint import default_model_path, load_model

    if (reason := native_dense.unavailable_reason()) is not None:
        raise SystemExit(f"the native dense kernel cannot run here: {reason}")
    model, _ = load_model(args.model or default_model_path(), "float32")
    *layers, head = model_matrices(model)
    report: dict = {"matmuls": [], "engine": None}
    for rows in args.rows:
        for group, shapes in (("layers", layers), ("head", [head])):
            result = time_matmuls(shapes, rows, args.repeats, args.iters)
            result["matrices"] = group
            result["threads"] = against_peak(shapes, rows, args.repeats, args.iters, args.threads)
            report["matmuls"].append(result)
            if not args.json:
                print(
                    f"{rows:5d} rows, {group} ({len(shapes)} matmul{'s' if len(shapes) > 1 else ''}"
                    f"): XLA {result['ms']['xla']:.2f} ms "
                    f"({result['gflop_s']['xla']:.0f} GFLOP/s), native {result['ms']['native']:.2f}"
                    f" ms ({result['gflop_s']['native']:.0f} GFLOP/s): XLA / native "
                    f"{result['ratio']:.2f}x"
                )
                for t, r in result["threads"].items():
                    print(
                        f"      native on {t} thread{'s' if t != '1' else ' '}: "
                        f"{r['gflop_s']:.0f} GFLOP/s = {r['fraction']:.2f} of the multiply-add "
                        f"peak on as many ({r['peak_gflop_s']:.0f} GFLOP/s); weights from "
                        f"memory {r['cold_gflop_s']:.0f} GFLOP/s = {r['cold_fraction']:.2f}"
                    )
    if args.engine_rounds:
        from claimbench.models.packed import DENSE_ENV

        report["engine"] = engine = engine_rounds(
            args.engine_rounds, args.workload.split(), DENSE_ENV, "dense"
        )
        if not args.json:
            for name, r in engine["rounds"].items():
                rounds = " / ".join(f"{t:,.0f}" for t in r["tok_s"])
                m = engine["median"][name]
                print(
                    f"engine, {name} matmul: {rounds} tok/s; median steps with prefill "
                    f"{m['prefill_ms']:.1f} ms, decode {m['decode_ms']:.2f} ms"
                )
            print(
                f"engine native / XLA (medians): {engine['ratio_tok_s']:.2f}x; identical "
                f"greedy outputs: {engine['identical_outputs']}"
            )
    if args.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
