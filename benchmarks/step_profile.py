"""Where a step's device time goes: our engine's steps on benchmarks/engine_vs_vllm.py's
workload, op by op, under JAX's profiler.

    python benchmarks/step_profile.py [engine_vs_vllm.py workload options] [--json]

Builds our engine as engine_vs_vllm.py does, runs one untimed round, then one round under
``jax.profiler``. Each executed step program is matched to the engine's step record of that
round (in order), and each op the step ran to what it is: a native kernel by its FFI target
(``claimbench_dense``, ``claimbench_paged_decode``, ...: the compiled programs are dumped with
XLA's ``--xla_dump_to`` so each ``ffi_call.N`` is read back to its target), else an XLA op by
its kind (``xla:wrapped_add``). Printed per kind of step (decode-only, or with prefill): the
steps, the median device time the engine recorded, and each op's mean milliseconds a step and
share of the step, largest first; the ops' sum against the span from the first op's start to
the last one's end (ops overlap where the sum is above it; gaps between them where below).
With --calls, also a decode step's native calls position by position (each layer's
projections and attention, the head, the sampler), median and mean microseconds over the
decode steps that made the most common sequence of calls.

The profiler slows what it watches (Python most: the engine's host work is not shown here), so
the figures are for shares, not for absolute step times: engine_vs_vllm.py times rounds.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

FFI_LINE = re.compile(r"%?((?:ffi_call|custom-call)\.?\d*) = .*custom_call_target=\"(\w+)\"")
MODULE_FILE = re.compile(r"module_(\d+)\..*after_optimizations\.txt$")


def ffi_targets(dump_dir: str) -> dict[tuple[int, str], str]:
    """{(program id, op name): FFI target} of every custom call in the dumped programs."""
    targets = {}
    for path in glob.glob(os.path.join(dump_dir, "*after_optimizations.txt")):
        match = MODULE_FILE.search(os.path.basename(path))
        if match is None:
            continue
        program = int(match.group(1))
        for line in Path(path).read_text().splitlines():
            if (call := FFI_LINE.search(line)) is not None:
                targets[(program, call.group(1))] = call.group(2)
    return targets


def op_kind(name: str, program: int | None, targets: dict) -> str:
    """A native kernel's target, or ``xla:`` and the op's name without its instance number."""
    if (target := targets.get((program, name))) is not None:
        return target
    return "xla:" + name.split(".")[0]


def executions(trace_path: str, targets: dict) -> list[dict]:
    """Each executed program's ops, in the order the executions started: {start_ns, span_ns,
    ops: {kind: ns}, calls: [[native kernel, ns], ...] in the order they started}."""
    from jax.profiler import ProfileData

    runs: dict[int, dict] = {}
    for plane in ProfileData.from_file(trace_path).planes:
        for line in plane.lines:
            if line.name == "python":
                continue
            for event in line.events:
                stats = dict(event.stats)
                run_id = stats.get("run_id")
                if run_id is None or event.name.startswith("ThunkExecutor"):
                    continue
                run = runs.setdefault(
                    run_id,
                    {"start": event.start_ns, "end": 0, "ops": collections.Counter(), "calls": []},
                )
                run["start"] = min(run["start"], event.start_ns)
                run["end"] = max(run["end"], event.start_ns + event.duration_ns)
                kind = op_kind(event.name, stats.get("program_id"), targets)
                run["ops"][kind] += event.duration_ns
                if not kind.startswith("xla:"):
                    run["calls"].append((event.start_ns, kind, event.duration_ns))
    ordered = sorted(runs.values(), key=lambda r: r["start"])
    return [
        {
            "start_ns": r["start"],
            "span_ns": r["end"] - r["start"],
            "ops": dict(r["ops"]),
            "calls": [[kind, ns] for _, kind, ns in sorted(r["calls"])],
        }
        for r in ordered
    ]


def call_positions(runs: list[dict], records: list) -> dict | None:
    """The decode-only steps' native calls position by position (a layer's projections, its
    attention, ..., the head, the sampler), over the steps that made the most common sequence
    of calls: {steps, calls: [{position, kind, median_us, mean_us}]}; None without any."""
    sequences = collections.defaultdict(list)
    for run, record in zip(runs, records, strict=True):
        if not record.num_prefill_tokens and run.get("calls"):
            sequences[tuple(kind for kind, _ in run["calls"])].append(run["calls"])
    if not sequences:
        return None
    kinds, steps = max(sequences.items(), key=lambda item: len(item[1]))
    calls = []
    for i, kind in enumerate(kinds):
        us = [step[i][1] / 1e3 for step in steps]
        calls.append(
            {
                "position": i,
                "kind": kind,
                "median_us": statistics.median(us),
                "mean_us": statistics.fmean(us),
            }
        )
    return {"steps": len(steps), "calls": calls}


def breakdown(runs: list[dict], records: list) -> dict:
    """Per kind of step ("decode" or "prefill", from the engine's records, matched to the
    executions in order): steps, median recorded device ms, the ops' mean ms a step, their
    sum and the mean span."""
    if len(runs) != len(records):
        raise SystemExit(
            f"the profile has {len(runs)} step executions but the engine recorded "
            f"{len(records)} steps: they cannot be matched"
        )
    kinds: dict[str, list[tuple[dict, object]]] = collections.defaultdict(list)
    for run, record in zip(runs, records, strict=True):
        kinds["prefill" if record.num_prefill_tokens else "decode"].append((run, record))
    out = {}
    for kind, pairs in kinds.items():
        n = len(pairs)
        ops: collections.Counter = collections.Counter()
        for run, _ in pairs:
            ops.update(run["ops"])
        ops_ms = {k: v / 1e6 / n for k, v in ops.most_common()}
        out[kind] = {
            "steps": n,
            "device_ms_median": 1e3 * statistics.median(r.device_s for _, r in pairs),
            "span_ms_mean": sum(run["span_ns"] for run, _ in pairs) / 1e6 / n,
            "ops_ms_sum": sum(ops_ms.values()),
            "ops_ms": ops_ms,
        }
    return out


def profile_round(workload: list[str]) -> dict:
    """Dump the step programs, build the engine, run one untimed round and one profiled."""
    dump = tempfile.mkdtemp(prefix="claimbench-steps-hlo-")
    trace = tempfile.mkdtemp(prefix="claimbench-steps-trace-")
    # Before JAX starts its backend: the flag is read once.
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + f" --xla_dump_to={dump} --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*step_fn.*"
    )
    import engine_vs_vllm as ev
    import jax

    # Programs loaded from a persistent compilation cache (JAX_COMPILATION_CACHE_DIR, which
    # the test suite sets) are not compiled, so nothing is dumped and every native call
    # would read as an unnamed ``xla:ffi_call``: compile them here.
    jax.config.update("jax_enable_compilation_cache", False)
    args, job = ev.ours_only(workload)
    engine = ev.build_ours(args, job)
    ev.ours_round(engine, job)  # compiles every program the round takes
    records: list = []
    jax.profiler.start_trace(trace)
    ev.ours_round(engine, job, records)
    jax.profiler.stop_trace()
    try:
        [trace_path] = glob.glob(f"{trace}/**/*.xplane.pb", recursive=True)
        runs = executions(trace_path, ffi_targets(dump))
        result = breakdown(runs, records)
        if (calls := call_positions(runs, records)) is not None:
            result["decode_calls"] = calls
        return result
    finally:  # tens of MB of programs and trace
        shutil.rmtree(dump, ignore_errors=True)
        shutil.rmtree(trace, ignore_errors=True)


def report(result: dict, top: int = 12, calls: bool = False) -> str:
    """The steps' op shares per kind of step; with ``calls``, a decode step's native calls
    position by position."""
    lines = []
    for kind in ("decode", "prefill"):
        if (r := result.get(kind)) is None:
            continue
        lines.append(
            f"{kind} steps: {r['steps']}, device {r['device_ms_median']:.2f} ms a step (median,"
            f" the engine's record); under the profiler ops {r['ops_ms_sum']:.2f} ms a step, "
            f"first to last op {r['span_ms_mean']:.2f} ms"
        )
        for name, ms in list(r["ops_ms"].items())[:top]:
            lines.append(f"  {ms:8.3f} ms  {ms / r['ops_ms_sum']:6.1%}  {name}")
    if calls and (c := result.get("decode_calls")) is not None:
        lines.append(f"a decode step's native calls in order ({c['steps']} steps alike):")
        for call in c["calls"]:
            lines.append(
                f"  {call['position']:3d}  {call['kind']:<28}{call['median_us']:9.1f} us median"
                f"{call['mean_us']:9.1f} us mean"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from claimbench.platform.jax_platforms import set_default_jax_platforms

    set_default_jax_platforms()  # before JAX starts a backend: no TPU runtime off a TPU host
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--calls", action="store_true", help="also a decode step's native calls, in order"
    )
    args, workload = parser.parse_known_args(argv)
    result = profile_round(workload)
    print(json.dumps(result) if args.json else report(result, calls=args.calls))


if __name__ == "__main__":
    main()
