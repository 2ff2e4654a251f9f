"""Model quality as the engine serves it: held-out perplexity and top-1 agreement.

Both come from one prompt pass: every held-out window is a prompt served with
``prompt_logprobs``, so the engine computes, through its own paged KV cache and chunked
prefill (with whatever weight and KV quantization it is configured for), log p(token | all
before it) and the most likely next token at every position. Perplexity per token is
exp(-mean log-prob) over all predicted positions. Top-1 agreement compares the argmax next
token position by position with a reference configuration's pass over the same windows,
so it measures how often the quantized (or lower-precision) model would pick a different
greedy token given the same context, without the divergence free-running generation adds.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from claimbench.engine.engine import LLMEngine
from claimbench.engine.sampling_params import SamplingParams
from claimbench.models.tokenizer import Tokenizer
from claimbench.workload.corpus import heldout_token_windows

# One output token: the pass exists for its prompt log-probs; ignore_eos keeps a window
# that happens to end in EOS from being cut short of that token.
PROMPT_PASS = SamplingParams(max_tokens=1, prompt_logprobs=True, ignore_eos=True)


@dataclass(frozen=True)
class PromptPass:
    """One engine's pass over ``n`` windows of ``length`` tokens (``length - 1`` predictions)."""

    logprobs: np.ndarray  # f32[n, length - 1] log p(window[i + 1] | window[: i + 1])
    top1: np.ndarray  # i32[n, length - 1] argmax next token after window[: i + 1]
    serve_s: float = float("nan")  # wall time of the pass, first-time compilation excluded

    @property
    def num_tokens(self) -> int:
        return int(self.logprobs.size)

    @property
    def tokens_per_s(self) -> float:
        """Prompt tokens processed per second of serving (compilation excluded)."""
        return (self.num_tokens + self.logprobs.shape[0]) / self.serve_s

    @property
    def perplexity(self) -> float:
        """Per-token perplexity: exp of the mean negative log-likelihood."""
        return float(np.exp(-np.mean(self.logprobs, dtype=np.float64)))


@functools.lru_cache(maxsize=8)
def heldout_windows(model_path: Path, n: int, length: int, seed: int) -> np.ndarray:
    """i32[n, length]: seeded windows of the shipped held-out text, in the model's tokenizer.

    Cached (read-only): tokenizing the held-out text takes seconds, and experiments ask for
    the same windows again (a warm-up pass, then the trial).
    """
    windows = heldout_token_windows(Tokenizer.from_dir(model_path), n, length, seed)
    windows.setflags(write=False)
    return windows


def prompt_pass(engine: LLMEngine, windows: np.ndarray) -> PromptPass:
    """Serve every window i32[n, length] as a prompt; collect its log-probs and argmaxes.

    The engine must serve prompts of ``length`` tokens plus one output, and must not take
    prompt tokens from a prefix cache (their log-probs would not be computed).
    """
    if windows.ndim != 2 or windows.shape[1] < 2:
        raise ValueError(f"need windows i32[n, length >= 2], got shape {windows.shape}")
    compile_s = engine.stats().compile_time_s
    start = time.perf_counter()
    outputs = engine.generate([w.tolist() for w in windows], PROMPT_PASS)
    serve_s = time.perf_counter() - start - (engine.stats().compile_time_s - compile_s)
    for out in outputs:
        if out.finish_reason != "length" or None in out.prompt_logprobs:
            raise ValueError(
                f"request {out.request_id} finished {out.finish_reason!r} "
                f"({out.rejected_reason or 'prompt log-probs missing'}); a prompt pass needs "
                "every window served in full with prefix caching off"
            )
    return PromptPass(
        logprobs=np.asarray([o.prompt_logprobs for o in outputs], np.float32),
        top1=np.asarray([o.prompt_top1 for o in outputs], np.int32),
        serve_s=serve_s,
    )


def ppl_delta_pct(candidate: PromptPass, reference: PromptPass) -> float:
    """How much higher the candidate's perplexity is, in percent of the reference's."""
    return 100.0 * (candidate.perplexity / reference.perplexity - 1.0)


def top1_agreement_pct(candidate: PromptPass, reference: PromptPass) -> float:
    """Percent of positions where both passes pick the same most likely next token."""
    if candidate.top1.shape != reference.top1.shape:
        raise ValueError(
            f"passes over different windows: {candidate.top1.shape} vs {reference.top1.shape}"
        )
    return 100.0 * float(np.mean(candidate.top1 == reference.top1))
