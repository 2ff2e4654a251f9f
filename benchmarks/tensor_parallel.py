"""Tensor parallelism side by side: decode step time and tokens/s at tp = 1, 2, 4.

    python benchmarks/tensor_parallel.py [--tps 1,2,4] [--batch 8] [--json] [--profile]

The shipped claimbench-tiny (4 query heads, 2 KV heads: tp=4 replicates each KV head twice)
serves one closed batch of ``--batch`` greedy requests (``--output-len`` tokens, EOS ignored)
once per setting, each engine compiled and warmed first:

* ``unsharded``: today's single-device placement, no mesh (build_engine(unsharded=True));
* ``tp=N``: the sharded path (engine/worker/sharding.py) over N devices; tp=1 is the same code
  over a one-device mesh, which the target holds within 5% of ``unsharded``.

Per row: the median decode step (device wall time of steps where every sequence decodes),
output tokens/s over the whole batch, per-device tokens/s, the ratio of the step to the
unsharded one, and, with ``--profile``, the share of device time in collective ops
(all-reduce, all-gather, ...) from a profiler trace of the decode steps. On a CPU host the
devices are virtual (``--xla_force_host_platform_device_count``): they share its cores, so
tp > 1 shows the sharded path's overhead, not a speedup.
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

from claimbench.platform.cpu_devices import set_cpu_device_count
from claimbench.platform.jax_platforms import set_default_jax_platforms

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tps", default="1,2,4")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="batches served per setting")
    parser.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=256,
        help="step budget (at least --batch); precompile compiles its token buckets",
    )
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--attention-backend", default="auto")
    parser.add_argument("--profile", action="store_true", help="collective share of the trace")
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


def collective_share(trace_dir: Path) -> float | None:
    """Fraction of the trace's XLA op time spent in collectives (None: no op events)."""
    files = list(trace_dir.rglob("*.trace.json.gz"))
    if not files:
        return None
    with gzip.open(files[0]) as f:
        events = json.load(f)["traceEvents"]
    ops = [e for e in events if e.get("ph") == "X" and "hlo_op" in e.get("args", {})]
    if not ops:
        return None
    total = sum(e["dur"] for e in ops)
    coll = sum(e["dur"] for e in ops if any(c in e["name"] for c in COLLECTIVES))
    return coll / total if total else None


def main() -> None:
    args = parse_args()
    tps = [int(t) for t in args.tps.split(",")]
    set_default_jax_platforms()
    set_cpu_device_count(["--tp", str(max(tps))])

    import jax
    import numpy as np

    from claimbench.engine.build import build_engine
    from claimbench.engine.config import EngineConfig
    from claimbench.engine.sampling_params import SamplingParams
    from claimbench.models.checkpoint import default_model_path, load_model
    from claimbench.models.tokenizer import Tokenizer
    from claimbench.workload.corpus import heldout_prompts

    path = default_model_path()
    tokenizer = Tokenizer.from_dir(path)
    model, _ = load_model(path, args.dtype)
    prompts = heldout_prompts(tokenizer, args.batch, args.input_len, args.input_len, 0)
    sampling = SamplingParams(max_tokens=args.output_len, ignore_eos=True)
    max_len = args.input_len + args.output_len
    settings = ["unsharded", *[f"tp={tp}" for tp in tps]]
    engines = {}
    for setting in settings:
        tp = 1 if setting == "unsharded" else int(setting.removeprefix("tp="))
        config = EngineConfig(
            dtype=args.dtype,
            max_num_seqs=args.batch,
            max_num_batched_tokens=max(args.batch, args.max_num_batched_tokens),
            max_model_len=max_len,
            attention_backend=args.attention_backend,
            tp=tp,
        )
        # The baseline: the same engine over a runner placed as before sharding existed.
        unsharded = setting == "unsharded"
        engine = build_engine(config, model=model, tokenizer=tokenizer, unsharded=unsharded)
        engine.precompile()
        engine.generate(prompts, sampling)  # warm: every step shape has run once
        engines[setting] = engine
    steps = {s: [] for s in settings}
    seconds = dict.fromkeys(settings, 0.0)
    tokens, shares = {}, {}
    # Settings take turns, batch by batch, so a busy host slows them alike.
    for _ in range(args.repeats):
        for setting, engine in engines.items():
            engine.reset()
            start = time.perf_counter()
            outs = engine.generate(prompts, sampling)
            seconds[setting] += time.perf_counter() - start
            frame = engine.steps_frame()
            decode = frame[(frame["num_prefill_tokens"] == 0) & (frame["num_seqs"] == args.batch)]
            steps[setting].extend(decode["device_s"].tolist())
            tokens.setdefault(setting, [o.token_ids for o in outs])
    if args.profile:  # one more batch per setting under the profiler, outside the timings
        for setting, engine in engines.items():
            engine.reset()
            trace = tempfile.mkdtemp()
            jax.profiler.start_trace(trace, create_perfetto_trace=True)
            engine.generate(prompts, sampling)
            jax.profiler.stop_trace()
            shares[setting] = collective_share(Path(trace))
    reference = 1000 * float(np.median(steps["unsharded"]))
    rows = []
    for setting, engine in engines.items():
        tp = engine.describe()["tp"]
        step_ms = 1000 * float(np.median(steps[setting]))
        tok_s = args.repeats * args.batch * args.output_len / seconds[setting]
        rows.append(
            {
                "setting": setting,
                "tp": tp,
                "decode_step_ms": step_ms,
                "step_vs_unsharded": step_ms / reference,
                "tokens_per_s": tok_s,
                "tokens_per_s_per_device": tok_s / tp,
                "collective_share": shares.get(setting),
                "same_tokens_as_unsharded": tokens[setting] == tokens["unsharded"],
                "describe": engine.describe(),
            }
        )
    if args.json:
        print(json.dumps(rows))
        return
    print(f"{jax.devices()[0].platform}: batch {args.batch}, {args.output_len} output tokens")
    print(
        f"{'setting':<10} {'step ms':>8} {'x unsh.':>8} {'tok/s':>8} {'tok/s/dev':>9} "
        f"{'collect.':>8} {'same':>5}"
    )
    for r in rows:
        share = "-" if r["collective_share"] is None else f"{100 * r['collective_share']:.1f}%"
        print(
            f"{r['setting']:<10} {r['decode_step_ms']:8.2f} {r['step_vs_unsharded']:8.3f} "
            f"{r['tokens_per_s']:8.0f} {r['tokens_per_s_per_device']:9.0f} {share:>8} "
            f"{str(r['same_tokens_as_unsharded']):>5}"
        )


if __name__ == "__main__":
    main()
