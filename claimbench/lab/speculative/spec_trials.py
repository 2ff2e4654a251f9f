"""One speculative-decoding comparison, shared by spec-decode-gain and spec-vs-batching.

Two engines over the same model, pool and buckets, one plain and one speculative, serve the
same batches of greedy requests (EOS ignored, so both produce exactly ``output_len`` tokens
each). They are built one at a time and take turns within every trial in ABBA order
(lab/engines/interleaved_arms.py): the plain engine never shares the chip with the speculative
one, which holds the target and its draft, and a drift in machine speed falls on both arms.
Each new engine is warmed before it measures; trial t's batch is the same prompts for both,
so per trial the speedup pairs the two arms' output tokens/s and the greedy mismatch count
compares their tokens. vLLM's acceptance metrics are recorded per trial from the
speculative engine's steps.

greedy_mismatch is a "never" condition, so it gets a positive control where asked
(``run_trials(control=True)``): greedy_mismatch_control is the same count for the speculative
engine with acceptance forced on (its verifier's rule "all": every draft token emitted
unverified, engine/worker/acceptance.py), on the same prompts (built once, after the arms). A
counter that reads zero there could not see a mismatch at all. A draft identical to the
target makes it zero too.

Counterfactuals (``counterfactual`` param, lab/engines/counterfactuals.py), the speculative arm's
verifier switched off: ``force-accept`` (every draft token emitted unverified: its greedy
output is the draft's, so greedy_mismatch counts every disagreement) and ``force-reject``
(every draft rejected: each step pays the draft and the verify chunk for one token, so the
speedup is speculation's cost alone).

Param ``device_step_s`` (0, the default: the real device): every step of both arms' timed
serving takes that long on the device (lab/engines/slow_device.py), whatever it computes, as on a
device whose step is bound by reading the weights and has compute to spare. It takes the
cost of verifying k tokens per sequence away, so with proposals accepted the speedup is
the tokens each step emits; the counterfactual tests use it to show ``speedup_at_b32`` can
land on either side of its threshold on a host where a verify chunk costs more than a
decode step.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np

from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.engines import counterfactuals
from claimbench.lab.engines.engine_settings import EngineSettings
from claimbench.lab.engines.interleaved_arms import interleaved_trials
from claimbench.lab.engines.slow_device import slow_device
from claimbench.lab.metrics.serving_summary import spec_decode_summary
from claimbench.lab.speculative.draft_models import DRAFT_PARAM, draft_path, pinned_draft
from claimbench.workload.corpus import heldout_prompts
from claimbench.workload.tokens import random_token_source

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext


def check_params(params: dict[str, Any]) -> None:
    """ValueError naming the first bad knob."""
    for key in ("batch", "num_spec_tokens", "input_len", "output_len"):
        if not isinstance(params[key], int) or params[key] < 1:
            raise ValueError(f"param {key} must be a positive integer, got {params[key]!r}")
    if params["proposer"] not in ("draft", "ngram"):
        raise ValueError(f"param proposer must be draft or ngram, got {params['proposer']!r}")
    pinned_draft(params[DRAFT_PARAM])
    counterfactuals.chosen(params, tuple(ACCEPTANCE))
    step_s = params.get("device_step_s", 0.0)
    if isinstance(step_s, bool) or not isinstance(step_s, int | float) or not 0 <= step_s < 10:
        raise ValueError(f"param device_step_s must be seconds in [0, 10), got {step_s!r}")


# The speculative arm's verifier rule under each counterfactual (acceptance.ACCEPTANCE_RULES).
ACCEPTANCE = {counterfactuals.NONE: "exact", "force-accept": "all", "force-reject": "none"}


def use_acceptance(engine: LLMEngine, rule: str) -> None:
    """Switch a built speculative ``engine``'s verifier to ``rule`` and compile its steps
    under it before anything is timed (nothing to do for the exact rule)."""
    if rule != "exact":
        engine.runner.set_acceptance(rule)
        engine.runner.precompile()


def arm_settings(params: dict[str, Any]) -> EngineSettings:
    """The plain and the speculative arm's engines, one at a time: room for every sequence's
    verify chunk in one step, prefix caching off (neither arm reuses the other's prompts).
    The speculative arm's draft model is its params' (``engine_options``; tpu-check reads the
    same ``draft_model`` param)."""
    batch, k = params["batch"], params["num_spec_tokens"]
    shared = dict(
        max_num_seqs=batch,
        max_num_batched_tokens=max(64, batch * (1 + k)),
        max_model_len=params["input_len"] + params["output_len"],
        prefix_caching="off",
        num_spec_tokens=k,
    )
    arms = {
        "plain": shared | {"speculative": "none"},
        "speculative": shared | {"speculative": params["proposer"]},
    }
    return EngineSettings(arms, one_at_a_time=True)


def engine_options(
    params: dict[str, Any],
    settings: dict[str, dict[str, Any]],
    serves_shipped_model: bool = False,
) -> dict[str, dict[str, Any]]:
    """Each arm's ctx.engine options: its ``settings`` (``arm_settings``) compiled ahead, and
    the speculative arm's draft where the params pin one (lab/speculative/draft_models.py). A pinned
    draft drafts for the model it shares a tokenizer with (the full profile's); a run that
    serves the shipped model (no --model: a lent device without the checkpoints) drafts with
    the shipped draft, and its provenance lists that draft among the models it used."""
    options = {arm: {"precompile": True} | overrides for arm, overrides in settings.items()}
    pinned = params["proposer"] == "draft" and not serves_shipped_model
    if pinned and (path := draft_path(params[DRAFT_PARAM])) is not None:
        options["speculative"]["draft_model_path"] = path
    return options


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


def greedy_mismatch(tokens: list[list[int]], reference: list[list[int]]) -> int:
    """Output tokens that differ from ``reference``'s, position by position, over a batch."""
    return sum(
        sum(a != b for a, b in zip(t, r, strict=True))
        for t, r in zip(tokens, reference, strict=True)
    )


def run_trials(
    ctx: RunContext,
    params: dict[str, Any],
    settings: dict[str, dict[str, Any]],
    speedup_metric: str,
    *,
    control: bool = False,
) -> None:
    """Every trial of the comparison, the arms (``settings``: ``arm_settings``) interleaved;
    the speedup is recorded as ``speedup_metric``, and with ``control``
    greedy_mismatch_control beside the mismatch."""
    output_len = params["output_len"]
    batches: list[list[list[int]]] = []  # per trial, drawn once: both arms serve the same

    def warm(arm: str, engine: LLMEngine) -> None:
        if arm == "speculative":
            use_acceptance(engine, ACCEPTANCE[params.get("counterfactual", counterfactuals.NONE)])
        if not batches:
            batches.extend(draw_prompts(engine, params, ctx.seed + t) for t in range(ctx.trials))
        serve(engine, batches[0], min(output_len, 8))  # warm caches and allocator paths

    step_s = params.get("device_step_s", 0.0)

    def measure(arm: str, engine: LLMEngine, trial: int) -> tuple[list, float]:
        prompts = batches[trial]
        with slow_device(engine, step_s) if step_s else nullcontext():
            tokens, seconds = serve(engine, prompts, output_len)
        rate = len(prompts) * output_len / seconds
        ctx.record("output_throughput", rate, trial=trial, unit="tok/s", arm=arm)
        steps = engine.steps_frame()
        ctx.save_frames(requests=engine.requests_frame(), steps=steps, arm=arm, trial=trial)
        if arm == "speculative":
            record_acceptance(ctx, spec_decode_summary(steps), trial, params)
        return tokens, rate

    options = engine_options(params, settings, serves_shipped_model=ctx.model_option is None)
    arms = interleaved_trials(ctx, options, measure, on_build=warm)
    plain_tokens = []
    for trial in range(ctx.trials):
        (plain, plain_rate), (spec, spec_rate) = arms["plain"][trial], arms["speculative"][trial]
        plain_tokens.append(plain)
        ctx.record(speedup_metric, spec_rate / plain_rate, trial=trial, unit="x")
        ctx.record("greedy_mismatch", greedy_mismatch(spec, plain), trial=trial, unit="tokens")
    if control:
        engine = ctx.engine(**options["speculative"])
        use_acceptance(engine, "all")
        for trial, plain in enumerate(plain_tokens):
            tokens, _ = serve(engine, batches[trial], output_len)
            ctx.record(
                "greedy_mismatch_control",
                greedy_mismatch(tokens, plain),
                trial=trial,
                unit="tokens",
                arm="speculative-accept-all",
            )


def record_acceptance(
    ctx: RunContext, spec: dict[str, float], trial: int, params: dict[str, Any]
) -> None:
    """vLLM's acceptance metrics of one trial's speculative serving."""
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
