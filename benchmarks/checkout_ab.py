"""Our engine at two commits, process against process, on engine_vs_vllm.py's workload.

    python benchmarks/checkout_ab.py OLD_REV [--new REV] [--pairs 3] [--rounds 4]
        [--scheduling off|on] [engine_vs_vllm.py workload options]

OLD_REV (and --new, else this working tree as it is) is checked out into a temporary git
worktree. Each pair runs one process of each, old first in the even pairs and new first in the
odd ones: the process builds our engine from its own tree, serves one untimed round, then
--rounds timed rounds, and reports its medians (output tokens/s, decode-only and prefill steps'
device time, idle core share) and a hash of its greedy tokens. Processes alternate so the host's
drift (its read ceiling moves within the hour) lands on both. Printed: each process's line, then
new / old of the medians over the pairs, new / old of tokens/s within each pair (their spread is
the noise a difference must stand out from), and whether every process gave the same tokens. A
change to the kernels or the engine is judged by this, not by two runs minutes apart.

On a 2-core Zen 3 host one commit gave 0.93x tokens/s as the working tree and 1.09x as a fresh
worktree of it against the same old commit (docs/performance/kernel_threads.md, 2026-12-07,
night): give --new REV when the change is committed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "@@checkout_ab "


def child(tree: Path, workload: list[str], rounds: int, scheduling: str) -> dict:
    """In the measured tree's process: its engine, one untimed round, ``rounds`` timed.

    Only engine_vs_vllm.py's long-standing calls (parse_args, make_job, build_ours,
    set_async_scheduling, ours_round) are taken from the measured tree, so an older commit
    runs too: the round's figures are summed up here, not by a helper of this tree's
    benchmarks (path_rounds.py has its own, which an older tree may lack)."""
    sys.path.insert(0, str(tree / "benchmarks"))
    import engine_vs_vllm as ev

    from claimbench.platform.jax_platforms import set_default_jax_platforms

    set_default_jax_platforms()
    # vLLM does not run here: its interpreter is named only to satisfy the shared parser.
    args = ev.parse_args([*workload, "--vllm-python", sys.executable])
    job = ev.make_job(args)
    engine = ev.build_ours(args, job)
    ev.set_async_scheduling(engine, scheduling == "on")
    ev.ours_round(engine, job)
    tok_s, decode, prefill, idle, tokens = [], [], [], [], None
    for _ in range(rounds):
        steps: list = []
        out = ev.ours_round(engine, job, steps)
        tok_s.append(out["output_tokens"] / out["elapsed_s"])
        idle.append(out["idle_core_frac"])
        decode += [s.device_s for s in steps if not s.num_prefill_tokens]
        prefill += [s.device_s for s in steps if s.num_prefill_tokens]
        tokens = out["token_ids"]
    return {
        "tok_s": statistics.median(tok_s),
        "decode_ms": 1e3 * statistics.median(decode) if decode else None,
        "prefill_ms": 1e3 * statistics.median(prefill) if prefill else None,
        "idle": statistics.median(idle),
        "tokens": hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:12],
    }


def run_process(tree: Path, label: str, workload: list[str], rounds: int, scheduling: str):
    """One measured process of ``tree``; its result line, or an error naming the tree."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(tree)]
    cmd += ["--rounds", str(rounds), "--scheduling", scheduling, *workload]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{label} ({tree}) failed: {tail[0]}")
    return {"label": label, **json.loads(lines[-1][len(MARK) :])}


def add_worktree(repo: Path, rev: str, where: Path) -> Path:
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "-q", "--detach", str(where), rev],
        check=True,
        capture_output=True,
        text=True,
    )
    return where


def remove_worktree(repo: Path, where: Path) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "remove", "--force", str(where)],
        capture_output=True,
    )


def pair_order(pair: int) -> tuple[str, str]:
    """Which runs first in a pair: old in the even ones, new in the odd ones, so a drift of the
    host over the run (or a cost of running second) lands on both sides alike."""
    return ("old", "new") if pair % 2 == 0 else ("new", "old")


def pair_ratios(results: list[dict]) -> list[float]:
    """new / old of output tokens/s within each pair, in the order the pairs ran: their spread
    is what a difference of the medians has to stand out from."""
    out = []
    for i in range(0, len(results) - 1, 2):
        by = {r["label"]: r["tok_s"] for r in results[i : i + 2]}
        out.append(by["new"] / by["old"])
    return out


def ratios(results: list[dict]) -> dict[str, float | None]:
    """new / old of each figure's median over the processes."""
    out: dict[str, float | None] = {}
    for key in ("tok_s", "decode_ms", "prefill_ms", "idle"):
        old = [r[key] for r in results if r["label"] == "old" and r[key] is not None]
        new = [r[key] for r in results if r["label"] == "new" and r[key] is not None]
        out[key] = statistics.median(new) / statistics.median(old) if old and new else None
    return out


def line(r: dict) -> str:
    def ms(v):
        return "n/a" if v is None else f"{v:.2f} ms"

    return (
        f"{r['label']:<4} {r['tok_s']:9.0f} tok/s  decode {ms(r['decode_ms'])}  "
        f"prefill {ms(r['prefill_ms'])}  idle {r['idle']:.3f}  tokens {r['tokens']}"
    )


def compare(args, workload: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"old": add_worktree(ROOT, args.old, Path(tmp) / "old")}
        try:
            if args.new is None:
                trees["new"] = ROOT
            else:
                trees["new"] = add_worktree(ROOT, args.new, Path(tmp) / "new")
            results = []
            for pair in range(args.pairs):
                for label in pair_order(pair):
                    r = run_process(trees[label], label, workload, args.rounds, args.scheduling)
                    print(line(r), flush=True)
                    results.append(r)
        finally:
            for tree in trees.values():
                if tree != ROOT:
                    remove_worktree(ROOT, tree)
    return {
        "old": args.old,
        "new": args.new or "working tree",
        "processes": results,
        "new_over_old": ratios(results),
        "pair_tok_s_ratios": pair_ratios(results),
        "tokens_identical": len({r["tokens"] for r in results}) == 1,
    }


def parse_args(argv: list[str] | None):
    """(options, the workload's options for engine_vs_vllm.py). OLD_REV comes first: taken
    apart from the options, as a workload option's value (``--requests 2``) is not a commit."""
    argv = list(sys.argv[1:] if argv is None else argv)
    old = argv.pop(0) if argv and not argv[0].startswith("-") else None
    p = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
        usage="checkout_ab.py OLD_REV [--new REV] [--pairs N] [--rounds N] "
        "[--scheduling off|on] [--json] [engine_vs_vllm.py workload options]",
    )
    p.add_argument("--new", default=None, help="the other commit (default: this working tree)")
    p.add_argument("--pairs", type=int, default=3, help="processes of each, alternating")
    p.add_argument("--rounds", type=int, default=4, help="timed rounds a process")
    p.add_argument("--scheduling", choices=["off", "on"], default="off", help="async scheduling")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    p.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args, workload = p.parse_known_args(argv)
    args.old = old
    if args.child is None and args.old is None:
        p.error("name the commit to compare against first (OLD_REV)")
    if args.pairs < 1 or args.rounds < 1:
        p.error("--pairs and --rounds must be at least 1")
    return args, workload


def main(argv: list[str] | None = None) -> None:
    args, workload = parse_args(argv)
    if args.child is not None:
        print(MARK + json.dumps(child(args.child, workload, args.rounds, args.scheduling)))
        return
    try:
        result = compare(args, workload)
    except (RuntimeError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", None) or str(e)
        print(f"checkout_ab: {detail.strip().splitlines()[-1]}", file=sys.stderr)
        raise SystemExit(1) from None
    ratio = result["new_over_old"]
    shown = "  ".join(f"{k} {'n/a' if v is None else f'{v:.3f}x'}" for k, v in ratio.items())
    print(f"new / old, medians over {args.pairs} processes each: {shown}")
    pairs = ", ".join(f"{v:.3f}" for v in result["pair_tok_s_ratios"])
    print(f"new / old tok/s within each pair, in order: {pairs}")
    same = "identical" if result["tokens_identical"] else "NOT identical"
    print(f"greedy tokens: {same} in every process")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
