"""The page allocator's placement side by side: adjacent pages against the queue's order.

    python benchmarks/page_adjacency.py [--rounds 5] [--json]

engine_vs_vllm.py's workload (held-out prompts of --min-input..--max-input tokens,
--output-len greedy tokens each, the same engine settings) served on one engine, in rounds
that alternate A B A B between two placements of uncached pages:

- ``adjacent``: the allocator as it is (engine/kv/prefix_cache.py: a sequence's next page
  next to its last where that page is free, a finished sequence's descending run taken
  ascending);
- ``queue``: the head of the free queue every time, as before the allocator placed pages
  (this script swaps the pool's page choice for that one; nothing else differs).

After one warm-up round each, so that the free queue holds released pages, as in a server
that has been running. Reported per placement: output tokens/s of each round and the median,
the decode-only steps' median time (steps with no prefill token), the share of a sequence's
consecutive pages that are adjacent and ascending, and whether every greedy output matched
the other placement's; then the ratio of the medians, adjacent / queue.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_vs_vllm as ev  # noqa: E402

from claimbench.engine.kv import block_manager, prefix_cache  # noqa: E402
from claimbench.hardware.host import host_description, host_line  # noqa: E402

PLACEMENTS = ("adjacent", "queue")


def _queue_head(pool: prefix_cache.BlockPool, after: int | None, wanted: int) -> int:
    return next(iter(pool._free))


@contextmanager
def placement(name: str):
    """Serve under ``name``: the allocator's own choice, or the free queue's head."""
    if name == "adjacent":
        yield
        return
    own = prefix_cache.BlockPool._next_page
    prefix_cache.BlockPool._next_page = _queue_head
    try:
        yield
    finally:
        prefix_cache.BlockPool._next_page = own


@contextmanager
def block_tables(into: list[list[int]]):
    """Each request's block table as it is freed, appended to ``into``."""
    own = block_manager.BlockManager.free

    def free(self, request):
        into.append(list(request.block_table))
        return own(self, request)

    block_manager.BlockManager.free = free
    try:
        yield
    finally:
        block_manager.BlockManager.free = own


def adjacent_share(tables: list[list[int]]) -> float:
    """Of the consecutive page pairs in the tables, the share that are p, p + 1."""
    pairs = [(a, b) for t in tables for a, b in zip(t, t[1:], strict=False)]
    return sum(b == a + 1 for a, b in pairs) / len(pairs) if pairs else float("nan")


def one_round(engine, job, name: str) -> dict:
    tables: list[list[int]] = []
    steps: list = []
    with placement(name), block_tables(tables):
        result = ev.ours_round(engine, job, steps)
    decode = [s.host_s + s.device_s for s in steps if s.num_prefill_tokens == 0]
    return {
        "tok_s": result["output_tokens"] / result["elapsed_s"],
        "decode_step_ms": statistics.median(decode) * 1e3 if decode else float("nan"),
        "adjacent_share": adjacent_share(tables),
        "token_ids": result["token_ids"],
    }


def summary(rounds: list[dict]) -> dict:
    return {
        "tok_s": [r["tok_s"] for r in rounds],
        "tok_s_median": statistics.median(r["tok_s"] for r in rounds),
        "decode_step_ms_median": statistics.median(r["decode_step_ms"] for r in rounds),
        "adjacent_share": statistics.median(r["adjacent_share"] for r in rounds),
    }


def run(args) -> dict:
    job = ev.make_job(args)
    engine = ev.build_ours(args, job)
    for name in PLACEMENTS:
        one_round(engine, job, name)  # warm-up: compiles, and fills the free queue
    rounds: dict[str, list[dict]] = {name: [] for name in PLACEMENTS}
    for _ in range(args.rounds):
        for name in PLACEMENTS:
            rounds[name].append(one_round(engine, job, name))
    reference = rounds["queue"][0]["token_ids"]
    result = {name: summary(rs) for name, rs in rounds.items()}
    result["greedy_identical"] = all(
        r["token_ids"] == reference for rs in rounds.values() for r in rs
    )
    result["ratio_tok_s"] = result["adjacent"]["tok_s_median"] / result["queue"]["tok_s_median"]
    result["ratio_decode_step"] = (
        result["adjacent"]["decode_step_ms_median"] / result["queue"]["decode_step_ms_median"]
    )
    result["host"] = host_line(host_description())
    return result


def report(result: dict) -> str:
    lines = [f"host: {result['host']}"]
    for name in PLACEMENTS:
        r = result[name]
        rounds = " ".join(f"{v:,.0f}" for v in r["tok_s"])
        lines.append(
            f"{name:9s} tok/s {r['tok_s_median']:,.0f} (rounds {rounds}); decode step "
            f"{r['decode_step_ms_median']:.2f} ms; adjacent pages {r['adjacent_share']:.2f}"
        )
    lines.append(
        f"adjacent / queue: tok/s {result['ratio_tok_s']:.3f}x, decode step time "
        f"{result['ratio_decode_step']:.3f}x; greedy outputs identical: "
        f"{result['greedy_identical']}"
    )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=5, help="timed rounds per placement, alternating")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--min-input", type=int, default=128)
    p.add_argument("--max-input", type=int, default=512)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    # engine_vs_vllm's settings for everything else (model, dtype, page size, backend, seed).
    # vLLM does not run here: its interpreter is named only to satisfy the shared parser.
    base = ev.parse_args(["--scheduling", "off", "--vllm-python", sys.executable])
    for key, value in vars(base).items():
        if not hasattr(args, key):
            setattr(args, key, value)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result, default=str))
    else:
        print(report(result))


if __name__ == "__main__":
    main()
