"""One speculative-decoding comparison, shared by spec-decode-gain and spec-vs-batching.

Two engines over the same model, pool and buckets, one plain and one speculative, serve the
same batch of greedy requests (EOS ignored, so both produce exactly ``output_len`` tokens
each). A trial times both arms (alternating which goes first, so drift on the machine
favours neither) and records output tokens/s per arm, the speedup, the greedy mismatch
count (output tokens that differ from plain decoding's) and vLLM's acceptance metrics.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from claimbench.engine.sampler import SamplingParams
from claimbench.harness.serving_summary import spec_decode_summary
from claimbench.workload.corpus import heldout_prompts
from claimbench.workload.tokens import random_token_source

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext

ARMS = ("plain", "speculative")


def check_params(params: dict[str, Any]) -> None:
    """ValueError naming the first bad knob."""
    for key in ("batch", "num_spec_tokens", "input_len", "output_len"):
        if not isinstance(params[key], int) or params[key] < 1:
            raise ValueError(f"param {key} must be a positive integer, got {params[key]!r}")
    if params["proposer"] not in ("draft", "ngram"):
        raise ValueError(f"param proposer must be draft or ngram, got {params['proposer']!r}")


def engines(ctx: RunContext, params: dict[str, Any]) -> dict[str, LLMEngine]:
    """The two arms' engines, compiled ahead: room for every sequence's verify chunk in one
    step, prefix caching off (neither arm reuses the other's prompts)."""
    batch, k = params["batch"], params["num_spec_tokens"]
    shared = dict(
        max_num_seqs=batch,
        max_num_batched_tokens=max(64, batch * (1 + k)),
        max_model_len=params["input_len"] + params["output_len"],
        prefix_caching="off",
        num_spec_tokens=k,
    )
    return {
        "plain": ctx.engine(precompile=True, speculative="none", **shared),
        "speculative": ctx.engine(precompile=True, speculative=params["proposer"], **shared),
    }


def draw_prompts(engine: LLMEngine, params: dict[str, Any], seed: int) -> list[list[int]]:
    """``batch`` held-out code prompts of ``input_len`` tokens (random ids for a model that
    has no tokenizer: the tests' tiny one)."""
    n, length = params["batch"], params["input_len"]
    if engine.tokenizer is not None:
        return heldout_prompts(engine.tokenizer, n, length, length, seed)
    source = random_token_source(engine.model_cfg.vocab_size)
    rng = np.random.default_rng(seed)
    return [list(source(rng, length)) for _ in range(n)]


def serve(engine: LLMEngine, prompts: list[list[int]], output_len: int) -> tuple[list, float]:
    """(each request's output tokens, wall seconds) for the batch served to completion."""
    engine.reset()
    start = time.perf_counter()
    outs = engine.generate(prompts, SamplingParams(max_tokens=output_len, ignore_eos=True))
    return [o.token_ids for o in outs], time.perf_counter() - start


def run_trials(ctx: RunContext, params: dict[str, Any], speedup_metric: str) -> None:
    """Every trial of the comparison; the speedup is recorded as ``speedup_metric``."""
    arms = engines(ctx, params)
    output_len = params["output_len"]
    for engine in arms.values():  # warm caches and allocator paths before anything is timed
        serve(engine, draw_prompts(engine, params, ctx.seed), min(output_len, 8))
    for trial in range(ctx.trials):
        prompts = draw_prompts(arms["plain"], params, ctx.seed + trial)
        tokens, rate = {}, {}
        for arm in ARMS[:: 1 if trial % 2 == 0 else -1]:
            tokens[arm], seconds = serve(arms[arm], prompts, output_len)
            rate[arm] = len(prompts) * output_len / seconds
            ctx.record("output_throughput", rate[arm], trial=trial, unit="tok/s", arm=arm)
            steps = arms[arm].steps_frame()
            ctx.save_frames(requests=arms[arm].requests_frame(), steps=steps, arm=arm, trial=trial)
        ctx.record(speedup_metric, rate["speculative"] / rate["plain"], trial=trial, unit="x")
        mismatch = sum(
            sum(a != b for a, b in zip(s, p, strict=True))
            for s, p in zip(tokens["speculative"], tokens["plain"], strict=True)
        )
        ctx.record("greedy_mismatch", mismatch, trial=trial, unit="tokens")
        spec = spec_decode_summary(arms["speculative"].steps_frame())
        for metric, unit in (
            ("draft_acceptance_rate", "ratio"),
            ("mean_acceptance_length", "tokens"),
            ("num_drafts", "drafts"),
            ("num_draft_tokens", "tokens"),
            ("num_accepted_tokens", "tokens"),
            ("draft_share_pct", "%"),
        ):
            ctx.record(metric, spec.get(metric, 0.0), trial=trial, unit=unit)
        for j in range(params["num_spec_tokens"]):
            rate_j = spec.get(f"acceptance_rate_pos_{j}", 0.0)
            ctx.record("acceptance_rate_per_pos", rate_j, trial=trial, unit="ratio", position=j)
