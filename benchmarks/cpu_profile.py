"""Where a round's CPU time goes: `perf` samples of our engine's process on
benchmarks/engine_vs_vllm.py's workload, grouped by what ran.

    python benchmarks/cpu_profile.py [--seconds 5] [--scheduling off|on] [--json]
        [engine_vs_vllm.py workload options]

Builds our engine as engine_vs_vllm.py does and serves one untimed round; then ``perf record``
samples this process on the CPU clock (``-F 1999``, every thread) for --seconds while rounds
run, and ``perf report`` is read back by shared object and symbol. Printed: the rounds' wall
time and idle core share during the sampling, then each group's share of the samples: the
native kernels by kernel (decode attention, prefill attention, dense, greedy, their threads'
spin and hand-off), XLA's compiled ops, jax's and XLA's runtime, Python, the C runtime, the OS
kernel, and the rest; with each group's three largest symbols. Where step_profile.py shows a
step's device time op by op, this shows every thread's CPU, the host's work included: what a
round spends besides the kernels, and how much of the kernels' own time is spin.

Needs `perf` with sampling allowed (``kernel.perf_event_paranoid`` <= 2 for one's own
processes); hardware counters are not needed (a virtual machine often has none). Where perf
cannot sample, it says so in one line and exits 2. Sampling slows the process a little: the
shares, not the round's time, are the result.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# (group, shared object pattern, symbol pattern), first match wins. The kernels' own names
# (structs and functions of claimbench/kernels/native's decode, prefill, dense, greedy and
# thread sources: tests/benchmarks/test_cpu_profile.py reads them from the sources and checks
# each lands in its kernel's group). Helpers more than one kernel inlines (Load, Exp, PagedKV's
# Row) are "other native" where they stay calls.
DECODE = (
    r"AttendSequence|PagedDecode|SoftmaxState|Page\w*State|HeadState|QueryState|PageSoftmax"
    r"|SumsOfEight|SequencePages|AlignedScratch|ChosenLoop|Pick(?:Attend|Group|HeadDim|Page)"
    r"|HorizontalSum|LoadVec|StoreVec|PrefetchLines|\(anonymous namespace\)::Decode\b"
)
ANON = r"\(anonymous namespace\)::"
GROUPS: list[tuple[str, str, str]] = [
    ("decode attention", r"libclaimbench_native", DECODE),
    (
        "prefill attention",
        r"libclaimbench_native",
        rf"AttendTile|PagedPrefill|{ANON}(?:Prefill|Item)\b",
    ),
    ("dense", r"libclaimbench_native", rf"::Tile|::Block\b|Dense|{ANON}Run\b"),
    (
        "greedy",
        r"libclaimbench_native",
        rf"Greedy|{ANON}Row\b|RowMax|FirstIndexOf|LogSumExp|LoadR\b",
    ),
    (
        "kernel threads (spin, hand-off)",
        r"libclaimbench_native",
        r"KernelThreads|Parallel|::Pause\b|ThreadCpuNs",
    ),
    ("other native", r"libclaimbench_native", r""),
    ("XLA compiled ops", r"^\[JIT\]", r""),
    ("jax and XLA runtime", r"libjax|_jax\.|xla|libtpu", r""),
    ("Python", r"libpython|^python", r""),
    ("numpy", r"_multiarray|numpy", r""),
    ("C runtime (malloc, libm, libstdc++)", r"^libc\.|^libm\.|libstdc\+\+|ld-linux|vdso", r""),
    ("OS kernel", r"kernel\.kallsyms|^\[kernel", r""),
]
OTHER = "other"
# A line of `perf report --stdio -t '|' --sort dso,sym`: " 29.67% |libfoo.so   |[.] symbol".
REPORT_LINE = re.compile(r"^\s*([\d.]+)%\s*\|([^|]*)\|\s*\[(.)\]\s*(.*?)\s*$")


def perf_path() -> str | None:
    return shutil.which("perf")


def parse_report(text: str) -> list[tuple[float, str, str]]:
    """(percent, shared object, symbol) of each sample line of the report."""
    rows = []
    for line in text.splitlines():
        if line.startswith("#") or not (m := REPORT_LINE.match(line)):
            continue
        rows.append((float(m.group(1)), m.group(2).strip(), m.group(4)))
    return rows


def group_of(dso: str, symbol: str) -> str:
    for name, dso_re, sym_re in GROUPS:
        if re.search(dso_re, dso) and (not sym_re or re.search(sym_re, symbol)):
            return name
    return OTHER


def grouped(rows: list[tuple[float, str, str]], top: int = 3) -> list[dict]:
    """Groups by their share of the samples (of the rows' total: perf's rounded percentages
    add to about 100), largest first, each with its largest symbols."""
    total = sum(percent for percent, _, _ in rows) or 1.0
    groups: dict[str, dict] = {}
    for percent, dso, symbol in rows:
        g = groups.setdefault(group_of(dso, symbol), {"share": 0.0, "symbols": {}})
        g["share"] += percent / total
        g["symbols"][symbol] = g["symbols"].get(symbol, 0.0) + percent / total
    out = []
    for name, g in sorted(groups.items(), key=lambda kv: -kv[1]["share"]):
        symbols = sorted(g["symbols"].items(), key=lambda kv: -kv[1])[:top]
        out.append({"group": name, "share": g["share"], "symbols": symbols})
    return out


def sampling_refused(perf: str) -> str | None:
    """Why perf cannot sample a process of ours here, or None."""
    probe = subprocess.run(
        [perf, "record", "-F", "99", "-o", os.devnull, "--", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no reason given"])[-1]
        return f"perf cannot sample here: {last}"
    return None


def sample_rounds(workload: list[str], seconds: float, async_scheduling: bool) -> dict:
    """Build the engine, serve a round, then sample this process while rounds run."""
    import engine_vs_vllm as ev

    args, job = ev.ours_only(workload, async_scheduling=async_scheduling)
    engine = ev.build_ours(args, job)
    ev.ours_round(engine, job)  # compiles every program the round takes
    with tempfile.TemporaryDirectory(prefix="claimbench-perf-") as tmp:
        data = str(Path(tmp) / "perf.data")
        cmd = [perf_path(), "record", "-F", "1999", "-p", str(os.getpid()), "-o", data]
        proc = subprocess.Popen(
            [*cmd, "--", "sleep", str(seconds)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.2)  # a moment for perf to attach (a round begun before it is partly unsampled)
        rounds = []
        while proc.poll() is None:
            rounds.append(ev.ours_round(engine, job))
        err = proc.communicate()[1]
        if proc.returncode != 0:
            last = (err.strip().splitlines() or ["no reason given"])[-1]
            raise RuntimeError(f"perf record exited {proc.returncode}: {last}")
        report = subprocess.run(
            [perf_path(), "report", "-i", data, "--stdio", "-t", "|", "--sort", "dso,sym"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return {
        "async_scheduling": job.async_scheduling,
        "seconds": seconds,
        "rounds_s": [r["elapsed_s"] for r in rounds],
        "idle_core_frac": [r["idle_core_frac"] for r in rounds],
        "groups": grouped(parse_report(report)),
    }


def report(result: dict) -> str:
    rounds = ", ".join(f"{s:.2f}" for s in result["rounds_s"])
    idle = ", ".join(f"{f:.2f}" for f in result["idle_core_frac"])
    lines = [
        f"async scheduling {'on' if result['async_scheduling'] else 'off'}; "
        f"{len(result['rounds_s'])} rounds while sampling ({result['seconds']:g} s): "
        f"{rounds} s, idle {idle} of the cores",
        "share of the CPU samples, by what ran:",
    ]
    for g in result["groups"]:
        lines.append(f"  {g['share']:6.1%}  {g['group']}")
        for symbol, share in g["symbols"]:
            if share >= 0.0005:
                lines.append(f"            {share:6.1%}  {symbol[:100]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from claimbench.platform.jax_platforms import set_default_jax_platforms

    set_default_jax_platforms()  # before JAX starts a backend: no TPU runtime off a TPU host
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="how long to sample")
    parser.add_argument(
        "--scheduling", choices=["off", "on"], default="off", help="our async scheduling"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args, workload = parser.parse_known_args(argv)
    if not 0 < args.seconds < 3600:  # also refuses nan and inf
        parser.exit(2, f"--seconds must be > 0 and under an hour, got {args.seconds:g}\n")
    if (perf := perf_path()) is None:
        parser.exit(2, "perf is not installed here (Debian: linux-perf): nothing to sample with\n")
    if (why := sampling_refused(perf)) is not None:
        parser.exit(2, why + "\n")
    try:
        result = sample_rounds(workload, args.seconds, args.scheduling == "on")
    except (RuntimeError, subprocess.CalledProcessError) as e:  # perf failed mid-way
        parser.exit(2, f"sampling failed: {e}\n")
    print(json.dumps(result) if args.json else report(result))


if __name__ == "__main__":
    main()
