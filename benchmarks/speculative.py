"""Speculative decoding side by side: plain decoding, n-gram prompt lookup, the draft model.

    python benchmarks/speculative.py [--batches 1,8,32] [--num-spec-tokens 4] [--reps 3] [--json]

The shipped claimbench-tiny serves greedy requests of --output-len tokens (EOS ignored) at
each batch size with each proposer, every engine compiled and warmed first. Three workloads:

* ``heldout``: held-out code prompts (the start of a line of a random held-out file);
* ``selfrep``: held-out code that repeats itself: of 8 x batch held-out prompts, those with
  the largest share of positions whose preceding 4 tokens already occurred in the prompt
  (ranked on the prompt alone, never on what the model answers);
* ``repeating``: a block of code three times, then its first line again, the case prompt
  lookup is for. The text is cut before a newline, where the tokenizer splits it anyway
  (it folds a newline into the next line's indent, so a prompt ending in a bare newline
  would end in a token the model never saw there). The script prints how many tokens of the
  model's greedy continuation repeat the block: prompt lookup proposes exactly that.

Per workload and batch the three engines (plain, n-gram, draft) serve in turn, ``--reps``
rounds with the order rotating, and each keeps its median time. Per row: output tokens/s,
the speedup over plain decoding on the same workload and batch, vLLM's acceptance metrics,
the proposer's share of step time (host, device and draft), and greedy mismatches against
plain decoding (tokens that differ; 0 in float32, where the engine is batch-invariant).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np

from claimbench.engine.build import build_engine
from claimbench.engine.config import EngineConfig
from claimbench.engine.engine import LLMEngine
from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.metrics.serving_summary import spec_decode_summary
from claimbench.models.checkpoint import default_model_path
from claimbench.models.tokenizer import Tokenizer
from claimbench.platform.jax_platforms import set_default_jax_platforms
from claimbench.workload.corpus import heldout_prompts

REPEATED_BLOCK = """def parse_header(line):
    key, _, value = line.partition(":")
    return key.strip().lower(), value.strip()

"""


def repeated_text(num_blocks: int) -> str:
    """The block num_blocks times, then its first line again (no newline)."""
    return REPEATED_BLOCK * num_blocks + REPEATED_BLOCK.splitlines()[0]


def self_repetition(prompt: list[int], n: int = 4) -> float:
    """Share of positions whose preceding n tokens already occurred earlier in the prompt."""
    seen: set[tuple[int, ...]] = set()
    hits = 0
    for i in range(n, len(prompt)):
        gram = tuple(prompt[i - n : i])
        hits += gram in seen
        seen.add(gram)
    return hits / max(len(prompt) - n, 1)


def workloads(tokenizer: Tokenizer, num: int, input_len: int, seed: int) -> dict[str, list]:
    """Prompt token lists per workload name, num of each."""
    heldout = heldout_prompts(tokenizer, num, input_len, input_len, seed)
    pool = heldout_prompts(tokenizer, 8 * num, input_len, input_len, seed + 1)
    selfrep = sorted(pool, key=self_repetition, reverse=True)[:num]
    repeating = tokenizer.encode(repeated_text(3))
    return {"heldout": heldout, "selfrep": selfrep, "repeating": [repeating] * num}


def block_continued(tokenizer: Tokenizer, output: list[int]) -> int:
    """Leading tokens of ``output`` that continue the repeated block."""
    prompt = tokenizer.encode(repeated_text(3))
    text = tokenizer.encode(REPEATED_BLOCK * 6)  # the prompt's text is a prefix of this
    if text[: len(prompt)] != prompt:
        raise ValueError("the repeating prompt does not end on a token boundary of its text")
    follow = text[len(prompt) :]
    return next(
        (i for i, (a, b) in enumerate(zip(output, follow, strict=False)) if a != b), len(output)
    )


def serve(engine: LLMEngine, prompts: list, params: SamplingParams) -> tuple[list, float]:
    """(token ids per prompt, seconds) for one batch served to completion."""
    engine.reset()
    start = time.perf_counter()
    outs = engine.generate(prompts, params)
    return [o.token_ids for o in outs], time.perf_counter() - start


def main() -> None:
    set_default_jax_platforms()  # before JAX starts a backend: no TPU runtime off a TPU host
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--num-spec-tokens", type=int, default=4)
    parser.add_argument("--input-len", type=int, default=96)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=3, help="timed runs per proposer and row")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    k = args.num_spec_tokens
    path = default_model_path()
    tokenizer = Tokenizer.from_dir(path)
    prompts = workloads(tokenizer, max(batches), args.input_len, args.seed)
    params = SamplingParams(max_tokens=args.output_len, ignore_eos=True)
    base = EngineConfig(
        model_path=path,
        dtype=args.dtype,
        max_num_seqs=max(batches),
        # Room for every sequence's verify chunk in one step.
        max_num_batched_tokens=max(batches) * (1 + k),
        max_model_len=512,
        num_spec_tokens=k,
    )
    proposers = ("none", "ngram", "draft")
    engines = {}
    for proposer in proposers:
        engines[proposer] = build_engine(dataclasses.replace(base, speculative=proposer))
        engines[proposer].precompile()
    rows = []
    plain_tokens: dict[tuple[str, int], list] = {}
    for name, batch_prompts in prompts.items():
        for batch in batches:
            chosen = batch_prompts[:batch]
            for engine in engines.values():
                serve(engine, chosen, dataclasses.replace(params, max_tokens=8))  # warm-up
            # The proposers take turns, the order rotating each round, so drift in the
            # machine's speed favours none of them; each keeps its median time.
            seconds: dict[str, list[float]] = {p: [] for p in proposers}
            tokens: dict[str, list] = {}
            spec: dict[str, dict] = {}
            for rep in range(args.reps):
                for proposer in proposers[rep % 3 :] + proposers[: rep % 3]:
                    engine = engines[proposer]
                    tokens[proposer], took = serve(engine, chosen, params)
                    seconds[proposer].append(took)
                    spec[proposer] = spec_decode_summary(engine.steps_frame())
            plain_tokens[name, batch] = tokens["none"]
            plain_s = float(np.median(seconds["none"]))
            for proposer in proposers:
                median_s = float(np.median(seconds[proposer]))
                mismatches = sum(
                    sum(a != b for a, b in zip(x, y, strict=True))
                    for x, y in zip(tokens[proposer], tokens["none"], strict=True)
                )
                rows.append(
                    {
                        "workload": name,
                        "batch": batch,
                        "proposer": proposer,
                        "output_tokens_per_s": batch * args.output_len / median_s,
                        "speedup": plain_s / median_s,
                        "acceptance_rate": spec[proposer].get("draft_acceptance_rate", np.nan),
                        "acceptance_length": spec[proposer].get("mean_acceptance_length", np.nan),
                        "draft_share_pct": spec[proposer].get("draft_share_pct", 0.0),
                        "greedy_mismatches": mismatches,
                    }
                )
    continued = block_continued(tokenizer, plain_tokens["repeating", batches[0]][0])
    if args.json:
        print(json.dumps({"rows": rows, "repeating_block_continued_tokens": continued}))
        return
    print(
        f"repeating: the greedy output continues the repeated block for {continued} of "
        f"{args.output_len} tokens"
    )
    print(
        f"{'workload':<10}{'batch':>6}{'proposer':>10}{'tok/s':>10}{'speedup':>9}"
        f"{'accept':>8}{'len':>7}{'draft%':>8}{'mismatch':>9}"
    )
    for r in rows:
        print(
            f"{r['workload']:<10}{r['batch']:>6}{r['proposer']:>10}"
            f"{r['output_tokens_per_s']:>10.1f}{r['speedup']:>9.2f}"
            f"{r['acceptance_rate']:>8.2f}{r['acceptance_length']:>7.2f}"
            f"{r['draft_share_pct']:>8.1f}{r['greedy_mismatches']:>9}"
        )


if __name__ == "__main__":
    main()
