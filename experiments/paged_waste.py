"""paged-waste: KV waste and concurrency of paged allocation vs max-length reservation.

A measurement on the real engine, not an allocator computation: each trial serves one
backlogged chat-like workload twice on the same engine (the same model, pool, pages and
buckets), once with paged allocation (a request's pages grow with its computed tokens) and
once with ``kv_allocation="reserve_request"`` (every page of the request's own maximum
length, its prompt + max_tokens, taken at admission, as a contiguous allocator that reserves
each request's maximum length up front). Each request asks for ``max_tokens`` (a client's
cap, clipped to the room max_model_len leaves after its prompt) and its answer ends at its
drawn output length, before the cap (the experiment aborts it there, as a model ending its
answer would; outputs are capped at max_tokens). So the reservation varies with each
prompt, and the contiguous arm's concurrency is what the length mix makes it, not the pool
over max_model_len. After every engine step the
engine's stats give the running requests' held slots and the slots holding a computed token.
Each serve runs ``num_steps`` steps (the same number in both allocations, so both pay alike)
and measures the steps from ``warmup_steps`` on (past the first fill of an empty pool) while
requests are still waiting (the pool, not the supply of work, limits what runs):

* waste = (held - filled) / held slots, summed over those steps: paged_waste_pct and
  contiguous_waste_pct (reserve_max);
* concurrency = mean running requests over those steps; concurrency_ratio = paged / reserved.

Paging's waste here is what serving really leaves: the unfilled tail of each request's last
page, with preemption (recompute) when the pool runs short, chunked prefill and the scheduler's
admission, so it can come out either way. The length mix is chat-like: lognormal prompt and
output lengths whose means default to ShareGPT's as the vLLM paper reports them (161 prompt
and 338 output tokens), sigma 1.0, the output capped to the room max_model_len leaves after
the prompt and to max_tokens. Both wastes depend on lengths only through their ratio to the
page size, max_tokens and max_model_len, so a CPU-sized profile may scale them down
together. Prompts are random token ids and outputs run to their
drawn length (EOS ignored): the model's text does not matter, its lengths do. Each trial
draws fresh lengths; which allocation runs first alternates by trial.

Counterfactuals (``counterfactual``, lab/engines/counterfactuals.py), each one allocation swapped:
``paging-off`` (the paged arm reserves each request's maximum length too) and
``reservation-off`` (the contiguous arm allocates pages as they fill too).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from claimbench.engine.config import DEFAULT_PAGE_SIZE
from claimbench.engine.kv.kv_cache import pool_bytes_for
from claimbench.engine.outputs import TokenEvent
from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.engines import counterfactuals
from claimbench.lab.engines.engine_settings import EngineSettings
from claimbench.lab.quality.precision import arm_order
from claimbench.models.checkpoint import read_config
from claimbench.workload.lengths import LognormalLength

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext
    from claimbench.models.config import ModelConfig

DEFAULT_PARAMS: dict[str, Any] = {
    "prompt_mean": 161.0,
    "prompt_sigma": 1.0,
    "output_mean": 338.0,
    "output_sigma": 1.0,
    "max_model_len": 2048,
    "max_tokens": 1024,  # each request's cap: what the contiguous arm reserves beyond its prompt
    "page_size": DEFAULT_PAGE_SIZE,
    "pool_tokens": 32768,  # KV slots in the pool (the null page besides)
    "num_requests": 1000,  # all queued at the start: the backlog
    "num_steps": 600,  # engine steps per serve
    "warmup_steps": 200,  # steps before measuring: the empty pool's first fill
    "max_num_seqs": 256,  # high, so the pool and not the sequence limit binds
    "engine": {},
    "counterfactual": counterfactuals.NONE,
}
ALLOCATIONS = {"paged": "paged", "contiguous": "reserve_request"}
# Each counterfactual's layout -> the allocation it is served with instead of its own.
COUNTERFACTUALS = {
    "paging-off": {"paged": "reserve_request"},
    "reservation-off": {"contiguous": "paged"},
}


def draw_lengths(
    params: dict[str, Any], rng: np.random.Generator, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """(prompt i64[n], output i64[n]) from the mix; output <= max_tokens and prompt + output
    <= max_model_len."""
    max_len = params["max_model_len"]
    prompt = LognormalLength(
        mean=params["prompt_mean"], sigma=params["prompt_sigma"], lo=1, hi=max_len - 1
    ).sample(rng, n)
    output = LognormalLength(
        mean=params["output_mean"], sigma=params["output_sigma"], lo=1, hi=max_len - 1
    ).sample(rng, n)
    return prompt, np.minimum(output, request_caps(params, prompt))


def request_caps(params: dict[str, Any], prompt: np.ndarray) -> np.ndarray:
    """i64[n]: each request's max_tokens, the client's cap clipped to its room."""
    return np.minimum(params["max_tokens"], params["max_model_len"] - prompt)


@dataclasses.dataclass(frozen=True)
class Occupancy:
    """The pool over the backlogged steps of one serve."""

    num_steps: int  # steps after which requests were still waiting
    held_slots: int  # summed over those steps
    filled_slots: int
    mean_running: float
    max_running: int

    @property
    def waste_pct(self) -> float:
        return 100.0 * (self.held_slots - self.filled_slots) / self.held_slots


def serve_backlog(
    engine: LLMEngine,
    prompts: list[list[int]],
    outputs: list[int],
    kv_allocation: str,
    *,
    num_steps: int,
    warmup_steps: int,
    caps: list[int] | None = None,
) -> Occupancy:
    """Queue every request at once under ``kv_allocation`` and run ``num_steps`` steps,
    sampling the engine's stats after each step from ``warmup_steps`` on while requests still
    wait; then abort what is left. Request i asks for ``caps[i]`` tokens (default: its
    output length) and its answer ends after ``outputs[i]``: it is aborted there."""
    engine.reset(dataclasses.replace(engine.config, kv_allocation=kv_allocation))
    caps = outputs if caps is None else caps
    ids, ends = (
        [],
        {},
    )  # ends: request id -> the output length its answer ends at, if before its cap
    for p, n, cap in zip(prompts, outputs, caps, strict=True):
        if not 1 <= n <= cap:
            raise ValueError(f"an output of {n} tokens must be in [1, max_tokens={cap}]")
        request_id = engine.add_request(p, SamplingParams(max_tokens=int(cap), ignore_eos=True))
        ids.append(request_id)
        if n < cap:
            ends[request_id] = int(n)
    held = filled = measured = running_sum = max_running = 0
    for step in range(num_steps):
        for event in engine.step():
            if isinstance(event, TokenEvent) and event.index + 1 == ends.get(event.request_id):
                engine.abort(event.request_id, "answer-ended")
        stats = engine.stats()
        if stats.num_waiting == 0:
            break  # the backlog drained: the supply of work, no longer the pool, limits
        if step < warmup_steps:
            continue
        measured += 1
        held += stats.num_held_slots
        filled += stats.num_filled_slots
        running_sum += stats.num_running
        max_running = max(max_running, stats.num_running)
    for request_id in ids:
        engine.abort(request_id, "backlog-drained")
    engine.step()  # delivers the aborts
    if measured == 0:
        raise ValueError(
            f"the backlog of {len(ids)} requests drained before step {warmup_steps}: "
            "queue more requests (num_requests) or warm up for fewer steps"
        )
    return Occupancy(measured, held, filled, running_sum / measured, max_running)


def engines(params: dict[str, Any], model: ModelConfig | None, dtype: str) -> EngineSettings:
    """One engine (both allocations serve on it) whose pool holds ``pool_tokens`` slots plus
    the null page of the served ``model`` in its KV format (no pool without a model)."""
    options: dict[str, Any] = dict(
        prefix_caching="off",
        page_size=params["page_size"],
        max_model_len=params["max_model_len"],
        max_num_seqs=params["max_num_seqs"],
    )
    if model is not None:
        pages = params["pool_tokens"] // params["page_size"]
        engine = {"dtype": dtype} | params["engine"] | options
        options["kv_pool_bytes"] = pool_bytes_for(model, engine, pages)
    return EngineSettings({"": options})


def _engine(ctx: RunContext, params: dict[str, Any]) -> LLMEngine:
    """The one engine of ``engines`` over the run's model."""
    settings = engines(params, read_config(ctx.model_path), ctx.dtype).settings
    return ctx.engine(compile_cache=True, **settings[""])


def _check(params: dict[str, Any]) -> None:
    keys = ("max_model_len", "max_tokens", "page_size", "pool_tokens", "num_requests")
    keys = (*keys, "max_num_seqs")
    for key in (*keys, "num_steps"):
        if not isinstance(params[key], int) or params[key] < 1:
            raise ValueError(f"param {key} must be a positive integer, got {params[key]!r}")
    if not isinstance(params["warmup_steps"], int) or not (
        0 <= params["warmup_steps"] < params["num_steps"]
    ):
        raise ValueError(
            f"param warmup_steps must be an integer in [0, num_steps={params['num_steps']}), "
            f"got {params['warmup_steps']!r}"
        )
    if params["max_model_len"] < 2:
        raise ValueError(f"param max_model_len must be >= 2, got {params['max_model_len']}")
    if params["pool_tokens"] < params["max_model_len"]:
        raise ValueError(
            f"pool_tokens={params['pool_tokens']} holds no max_model_len="
            f"{params['max_model_len']} reservation"
        )


def run(ctx: RunContext) -> None:
    """Record paged_waste_pct, contiguous_waste_pct and concurrency_ratio per trial."""
    params = ctx.merged(DEFAULT_PARAMS)
    _check(params)
    allocations = ALLOCATIONS | COUNTERFACTUALS.get(
        counterfactuals.chosen(params, tuple(COUNTERFACTUALS)), {}
    )
    engine = _engine(ctx, params)
    vocab = engine.model_cfg.vocab_size
    for trial in range(ctx.trials):
        rng = np.random.default_rng([ctx.seed, trial])
        prompt_lens, outputs = draw_lengths(params, rng, params["num_requests"])
        caps = request_caps(params, prompt_lens).tolist()
        prompts = [rng.integers(3, vocab, n).tolist() for n in prompt_lens]
        occupancy = {}
        for layout in arm_order(list(ALLOCATIONS), trial):
            occupancy[layout] = serve_backlog(
                engine,
                prompts,
                outputs,
                allocations[layout],
                num_steps=params["num_steps"],
                warmup_steps=params["warmup_steps"],
                caps=caps,
            )
            ctx.save_frames(steps=engine.steps_frame(), layout=layout, trial=trial)
        paged, contiguous = occupancy["paged"], occupancy["contiguous"]
        ctx.record("paged_waste_pct", paged.waste_pct, trial=trial, unit="%")
        ctx.record("contiguous_waste_pct", contiguous.waste_pct, trial=trial, unit="%")
        ratio = paged.mean_running / contiguous.mean_running
        ctx.record("concurrency_ratio", ratio, trial=trial, unit="x")
        for layout, occ in occupancy.items():
            for metric, value, unit in (
                ("mean_running", occ.mean_running, "sequences"),
                ("max_running", occ.max_running, "sequences"),
                ("backlogged_steps", occ.num_steps, "steps"),
            ):
                ctx.record(metric, value, trial=trial, unit=unit, layout=layout)
