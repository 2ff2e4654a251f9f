"""Engine configuration: EngineConfig, six small frozen configs validated on construction.

Code reads a section (``config.cache.page_size``); flat option names are the edges' form
(claims.yaml, the CLI, meta.json), translated in one place: ``EngineConfig.from_flat`` and
``config.flat()``."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from claimbench.engine.config_ladder import Rung, as_ladder, check_ladder
from claimbench.engine.config_tenants import Tenant, TenantTable
from claimbench.kernels.backend import BACKENDS

DTYPES = ("bfloat16", "float32", "float16")
KV_DTYPES = ("auto", "bf16", "f32", "int8", "fp8")
WEIGHT_FORMATS = ("bf16", "int8", "fp8")  # bf16 = unquantized, in the model dtype
# paged: a request's pages grow with its computed tokens; reserve_max: it takes every page of
# max_model_len at admission, as a server that reserves the model's maximum length does;
# reserve_request: every page of its own prompt + max_tokens, as a contiguous allocator that
# reserves each request's maximum length up front.
KV_ALLOCATIONS = ("paged", "reserve_max", "reserve_request")
# none | draft (a small model proposes) | ngram (prompt lookup proposes); engine/spec/.
SPECULATIVE = ("none", "draft", "ngram")
# Draft tokens per step at most: a verify chunk is 1 + k tokens and every one of its
# positions is projected to the vocabulary, so k is kept well under the token budget.
MAX_SPEC_TOKENS = 16
# Who shares prefix-cache blocks (kv/prefix_cache.py): no one, a tenant's requests, every
# request, or every request with the same salt.
PREFIX_MODES = ("off", "per-tenant", "shared", "salted")
# Waiting-queue orderings and preemption victims by name (sched/policies.py implements each).
SCHEDULING_POLICIES = ("fcfs", "priority", "priority-aging", "vtc", "wvtc")
VICTIM_POLICIES = ("newest", "lowest-priority", "fair-share", "tier-fair-share")
DEFAULT_AGING_S = 5.0  # priority-aging: waiting this long gains one tier
DEFAULT_INPUT_WEIGHT = 1.0  # vtc, wvtc: service charged per input token
DEFAULT_OUTPUT_WEIGHT = 2.0  # vtc, wvtc: service charged per output token
# Tokens per KV page unless a config names its own: the one default every pool size and
# experiment reads (harness and experiments import it rather than retype it).
DEFAULT_PAGE_SIZE = 16


@dataclass(frozen=True)
class Knob:
    """One EngineConfig option as an operator sees it."""

    runtime: bool  # True: only the host reads it, so LLMEngine.reset may switch it
    description: str  # what it controls and, for a new-engine option, what it shapes


# Every EngineConfig field, in field order: `claimbench engine knobs` prints this table and
# LLMEngine.reset switches only its runtime rows. A field missing here needs a new engine.
KNOBS: dict[str, Knob] = {
    "model_path": Knob(False, "model directory: the weights are loaded at construction"),
    "dtype": Knob(False, "compute dtype: weights and every compiled step are in it"),
    "kv_dtype": Knob(False, "KV storage dtype: the pool's layout is allocated in it"),
    "kv_scale": Knob(False, "fp8 KV scale: baked into the pool when it is allocated"),
    "weights": Knob(False, "weight-only quantization: applied when the weights load"),
    "kv_pool_bytes": Knob(False, "KV pool size: the pages are allocated once"),
    "page_size": Knob(False, "tokens per KV page: the pool's and block tables' shapes"),
    "max_num_seqs": Knob(False, "sequences per step: the compiled sequence buckets"),
    "max_num_batched_tokens": Knob(False, "token budget per step: the compiled token buckets"),
    "max_model_len": Knob(False, "longest request: block-table width and rope table"),
    "attention_backend": Knob(False, "attention kernel: compiled into every step"),
    "scheduling_policy": Knob(True, "waiting-queue order (fcfs, priority, vtc, ...)"),
    "victim_policy": Knob(True, "which running request preemption evicts"),
    "priority_aging_s": Knob(True, "priority aging: this long a wait raises one tier"),
    "vtc_input_weight": Knob(True, "fair-share service charged per input token"),
    "vtc_output_weight": Knob(True, "fair-share service charged per output token"),
    "tenants": Knob(True, "tenants: tiers, weights, SLOs, admission limits, KV quotas"),
    "seed": Knob(True, "seed of requests that bring none (None: fresh entropy each)"),
    "compilation_cache_dir": Knob(False, "persistent compilation cache: set when steps compile"),
    "prefix_caching": Knob(True, "prefix cache: off, per-tenant, shared or salted"),
    "kv_allocation": Knob(True, "KV pages grow with a request (paged) or are reserved up front"),
    "speculative": Knob(False, "speculative decoding: the draft and verify steps compiled"),
    "num_spec_tokens": Knob(False, "draft tokens per step: the verify steps' shapes"),
    "draft_model_path": Knob(False, "draft model: its weights are loaded at construction"),
    "ladder": Knob(True, "degradation ladder: service cuts taken one rung at a time under load"),
    "tp": Knob(False, "tensor-parallel devices: weights and KV heads are placed over them"),
    "async_scheduling": Knob(
        True, "build step N+1 while step N runs on the device (default: on for CPU only)"
    ),
    "early_exit_threshold": Knob(False, "early exit: exit heads and their threshold compiled in"),
    "batch_invariant": Knob(
        False, "batch-invariant matmuls and attention: a request's bits ignore its batch (CPU)"
    ),
    "token_buckets": Knob(False, "token counts steps are padded to: one compiled step each"),
}
# Fields only the host reads: LLMEngine.reset may switch them without recompiling.
HOST_FIELDS = tuple(name for name, knob in KNOBS.items() if knob.runtime)
# Async scheduling's default per platform (jax.default_backend()): on only where it has
# measured faster beyond the noise (docs/performance/engine_vs_transformers.md). Nowhere yet:
# on this project's 2-core CPU, benchmarks/engine_vs_transformers.py's batch-32 decode ran
# +25.9% and +1.5% off -> on in two runs (the second inside the machine's ~10% run-to-run
# spread), and turned on it changed the experiments' serving dynamics (fair-victim's tiny
# workload stopped preempting); on an H200 serving the shipped model, whose decode step is
# almost all host work, -14% +- 16%.
ASYNC_SCHEDULING_DEFAULT = {"cpu": False}
MIN_TOKEN_BUCKET = 16  # smallest padded token count a step is compiled for
MIN_SEQ_BUCKET = 8  # smallest padded sequence-slot count


@dataclass(frozen=True)
class PolicyParams:
    """The knobs orderings and victim policies read (SchedulerConfig.policy_params)."""

    aging_s: float = DEFAULT_AGING_S  # priority-aging: waiting this long gains one tier
    input_weight: float = DEFAULT_INPUT_WEIGHT  # vtc: service per input token
    output_weight: float = DEFAULT_OUTPUT_WEIGHT  # vtc: service per output token
    tenants: TenantTable = field(default_factory=TenantTable)

    def __post_init__(self) -> None:
        if not self.aging_s > 0:
            raise ValueError(f"priority_aging_s must be > 0, got {self.aging_s}")
        w_in, w_out = self.input_weight, self.output_weight
        if not (w_in >= 0 and w_out >= 0 and w_in + w_out > 0):
            raise ValueError(
                f"vtc_input_weight={w_in} and vtc_output_weight={w_out} must be >= 0, not both 0"
            )


@dataclass(frozen=True)
class ModelOptions:
    """What is served and how it computes."""

    model_path: Path | None = None  # local HF model directory; None = shipped claimbench-tiny
    dtype: str = "bfloat16"  # model compute dtype: bfloat16 | float32 | float16
    weights: str = "bf16"  # weight-only quantization: bf16 (none) | int8 | fp8, per channel
    attention_backend: str = "auto"  # auto | xla | cpu | pallas (kernels/backend.py)
    # Early exit (models/early_exit.py): a decode token leaves at the first exit head whose
    # confidence reaches this; None = off. Needs exit heads beside the model (train-exits).
    early_exit_threshold: float | None = None
    # Batch-invariant kernels (models/packed.py, docs/serving.md): a request's greedy tokens
    # and log-probs are the same bits whatever else its steps hold. CPU ("cpu" backend) only.
    batch_invariant: bool = False

    def __post_init__(self) -> None:
        _one_of("dtype", self.dtype, DTYPES)
        if not isinstance(self.batch_invariant, bool):
            raise ValueError(f"batch_invariant must be a bool, got {self.batch_invariant!r}")
        _one_of("weights", self.weights, WEIGHT_FORMATS)
        _one_of("attention_backend", self.attention_backend, BACKENDS)
        threshold = self.early_exit_threshold
        if threshold is not None:
            if isinstance(threshold, bool) or not isinstance(threshold, int | float):
                raise ValueError(
                    f"early_exit_threshold must be a number or None, got {threshold!r}"
                )
            if not threshold >= 0:
                raise ValueError(f"early_exit_threshold must be >= 0, got {threshold}")


@dataclass(frozen=True)
class CacheConfig:
    """The KV pool: its storage, size, pages, and how requests take them."""

    kv_dtype: str = "auto"  # auto (= dtype) | bf16 | f32 | int8 | fp8
    kv_scale: str | float = 1.0  # fp8 KV tensor scale: a number, or "calibrate" (held-out)
    kv_pool_bytes: int = 256 * 2**20  # KV budget: pages + scales, null page included
    page_size: int = DEFAULT_PAGE_SIZE  # tokens per KV page
    prefix_caching: str = "per-tenant"  # off | per-tenant | shared | salted (prefix_cache.MODES)
    kv_allocation: str = "paged"  # paged | reserve_max | reserve_request (KV_ALLOCATIONS)

    def __post_init__(self) -> None:
        _one_of("kv_dtype", self.kv_dtype, KV_DTYPES)
        if self.kv_scale != "calibrate" and not 0 < _as_float(self.kv_scale) < float("inf"):
            raise ValueError(f"kv_scale {self.kv_scale!r} is neither 'calibrate' nor a number > 0")
        _one_of("prefix_caching", self.prefix_caching, PREFIX_MODES)
        _one_of("kv_allocation", self.kv_allocation, KV_ALLOCATIONS)
        _positive(self, "kv_pool_bytes", "page_size")


@dataclass(frozen=True)
class SchedulerConfig:
    """What runs each step: budgets, orderings, victims, tenants, the ladder."""

    max_num_seqs: int = 32  # sequences in flight (running) at once
    max_num_batched_tokens: int = 512  # token budget of one step
    max_model_len: int = 1024  # prompt + output tokens of one request
    scheduling_policy: str = "fcfs"  # waiting-queue order, see policies.ORDERINGS
    victim_policy: str = "newest"  # preemption victim, see policies.VICTIMS
    priority_aging_s: float = DEFAULT_AGING_S  # priority-aging: this long a wait = one tier
    vtc_input_weight: float = DEFAULT_INPUT_WEIGHT  # vtc, wvtc: service per input token
    vtc_output_weight: float = DEFAULT_OUTPUT_WEIGHT  # vtc, wvtc: service per output token
    tenants: tuple[Tenant, ...] = ()  # configured tenants; others get Tenant defaults
    # Requests without a seed of their own: None draws fresh entropy for each (a server's
    # must: a seed from a counter shared by every tenant lets one count the others'
    # requests); an int derives them from (seed, submission number), for offline runs only.
    seed: int | None = None
    ladder: tuple[Rung, ...] = ()  # degradation ladder, climbed under load (sched/ladder.py)
    # Overlap the host's work for step N+1 with the device's step N (sched/async_sched.py);
    # None = the platform's measured default (ASYNC_SCHEDULING_DEFAULT: off everywhere so far).
    async_scheduling: bool | None = None

    def __post_init__(self) -> None:
        _one_of("scheduling_policy", self.scheduling_policy, SCHEDULING_POLICIES)
        _one_of("victim_policy", self.victim_policy, VICTIM_POLICIES)
        if self.async_scheduling is not None and not isinstance(self.async_scheduling, bool):
            raise ValueError(
                f"async_scheduling must be true, false or None (the platform's default), "
                f"got {self.async_scheduling!r}"
            )
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0
        ):
            raise ValueError(f"seed must be None or an integer >= 0, got {self.seed!r}")
        object.__setattr__(self, "tenants", tuple(self.tenants))
        self.policy_params()  # validates the tenants and the policies' knobs
        object.__setattr__(self, "ladder", as_ladder(self.ladder))
        _positive(self, "max_num_seqs", "max_num_batched_tokens", "max_model_len")
        if self.max_num_batched_tokens < self.max_num_seqs:
            # Every running sequence needs at least one token of the budget per step.
            raise ValueError(
                f"max_num_batched_tokens={self.max_num_batched_tokens} < "
                f"max_num_seqs={self.max_num_seqs}"
            )
        check_ladder(self.ladder, self.max_num_batched_tokens)

    def policy_params(self) -> PolicyParams:
        """What the orderings and victim policies read from this config."""
        return PolicyParams(
            aging_s=self.priority_aging_s,
            input_weight=self.vtc_input_weight,
            output_weight=self.vtc_output_weight,
            tenants=TenantTable(self.tenants),
        )


@dataclass(frozen=True)
class ParallelConfig:
    """How many devices the model and the KV pool are split over."""

    tp: int = 1  # tensor-parallel devices: weights and the KV pool split over them (sharding.py)

    def __post_init__(self) -> None:
        _positive(self, "tp")


@dataclass(frozen=True)
class SpecConfig:
    """Speculative decoding: who proposes, and how many tokens a step verifies."""

    speculative: str = "none"  # none | draft | ngram (SPECULATIVE)
    num_spec_tokens: int = 4  # draft tokens proposed per sequence and step, 1..MAX_SPEC_TOKENS
    draft_model_path: Path | None = None  # speculative="draft"; None = shipped tiny draft

    def __post_init__(self) -> None:
        _one_of("speculative", self.speculative, SPECULATIVE)
        if not 1 <= self.num_spec_tokens <= MAX_SPEC_TOKENS:
            raise ValueError(
                f"num_spec_tokens must be in [1, {MAX_SPEC_TOKENS}], got {self.num_spec_tokens}"
            )


@dataclass(frozen=True)
class CompileConfig:
    """The compiled steps: the token counts they are padded to, and where they are cached."""

    compilation_cache_dir: Path | None = None  # persistent JAX compilation cache
    # The token counts a step is padded to and compiled for, ascending, the last one
    # max_num_batched_tokens; () = powers of two from MIN_TOKEN_BUCKET (worker/buckets.py).
    token_buckets: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        buckets = self.token_buckets
        if isinstance(buckets, str | bytes) or not hasattr(buckets, "__iter__"):
            raise ValueError(f"token_buckets must be a list of token counts, got {buckets!r}")
        buckets = tuple(buckets)
        object.__setattr__(self, "token_buckets", buckets)
        if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in buckets):
            raise ValueError(f"token_buckets must be integers >= 1, got {list(buckets)}")


# Each section of EngineConfig and its config class, in the order a flat config lists them.
SECTIONS: dict[str, type] = {
    "model": ModelOptions,
    "cache": CacheConfig,
    "scheduler": SchedulerConfig,
    "parallel": ParallelConfig,
    "spec": SpecConfig,
    "compilation": CompileConfig,
}
# Flat option name (what claims.yaml, the CLI and EngineConfig(**options) use) -> its section.
SECTION_OF: dict[str, str] = {
    f.name: section for section, cls in SECTIONS.items() for f in fields(cls)
}


@dataclass(frozen=True, init=False)
class EngineConfig:
    """Everything that shapes the engine, as six small frozen configs (vLLM's VllmConfig
    pattern): ``model``, ``cache``, ``scheduler``, ``parallel``, ``spec`` and ``compilation``.

    Read through the sections: ``config.cache.page_size``. The flat option names claims.yaml
    and the CLI use go through ``from_flat`` and ``flat()``; ``EngineConfig(page_size=32,
    max_num_seqs=8)`` and ``dataclasses.replace(config, page_size=64)`` take them too, each
    option put in its section. Sections may be passed whole; flat options given beside them
    win. There is no flat read (``config.page_size`` is an AttributeError). An unknown option
    is a TypeError, a bad value a ValueError (one line each)."""

    model: ModelOptions
    cache: CacheConfig
    scheduler: SchedulerConfig
    parallel: ParallelConfig
    spec: SpecConfig
    compilation: CompileConfig

    def __init__(self, **options: Any) -> None:
        sections = {name: options.pop(name, None) for name in SECTIONS}
        unknown = sorted(set(options) - set(SECTION_OF))
        if unknown:
            raise TypeError(f"EngineConfig got unexpected option(s) {unknown}")
        for name, cls in SECTIONS.items():
            given = sections[name]
            if given is not None and not isinstance(given, cls):
                raise TypeError(f"EngineConfig {name} must be a {cls.__name__}, got {given!r}")
            mine = {k: v for k, v in options.items() if SECTION_OF[k] == name}
            if given is None:
                value = cls(**mine)
            else:
                value = dataclasses.replace(given, **mine) if mine else given
            object.__setattr__(self, name, value)
        self._check_across_sections()

    def _check_across_sections(self) -> None:
        buckets = self.compilation.token_buckets
        budget = self.scheduler.max_num_batched_tokens
        ascending = list(buckets) == sorted(set(buckets))
        if buckets and (not ascending or buckets[-1] != budget):
            raise ValueError(
                f"token_buckets must ascend to max_num_batched_tokens={budget}, got {list(buckets)}"
            )
        # The exit heads ride in the unsharded step and the verify step samples many
        # positions per sequence: neither is wired for early exit.
        tp, speculative = self.parallel.tp, self.spec.speculative
        if self.model.early_exit_threshold is not None and (tp != 1 or speculative != "none"):
            raise ValueError(
                f"early_exit_threshold needs tp=1 and speculative='none', "
                f"got tp={tp}, speculative={speculative!r}"
            )

        if self.model.batch_invariant:
            self._check_batch_invariant()

    def _check_batch_invariant(self) -> None:
        # What the invariant path covers: one device's packed float matmuls and the native
        # attention. Quantized weights, split weights, drafts and exit heads are not on it.
        model = self.model
        if model.attention_backend not in ("auto", "cpu"):
            raise ValueError(
                f"batch_invariant needs attention_backend 'cpu' (or 'auto' on a CPU), "
                f"got {model.attention_backend!r}"
            )
        others = {
            "weights": (model.weights, "bf16"),
            "tp": (self.parallel.tp, 1),
            "speculative": (self.spec.speculative, "none"),
            "early_exit_threshold": (model.early_exit_threshold, None),
        }
        wrong = {name: got for name, (got, want) in others.items() if got != want}
        if wrong:
            raise ValueError(
                "batch_invariant needs weights='bf16', tp=1, speculative='none' and "
                f"early_exit_threshold=None, got {wrong}"
            )
        # A preempted request is recomputed by the prefill kernel, whose reductions round
        # differently from the decode steps it replaces: a co-tenant that forces a preemption
        # would move the request's bits. Reserving a request's pages up front means no
        # running request ever needs pages, so none is preempted.
        if self.cache.kv_allocation == "paged":
            raise ValueError(
                "batch_invariant needs kv_allocation 'reserve_request' or 'reserve_max' "
                "(with 'paged' a co-tenant can force a preemption, and the recompute rounds "
                "differently), got 'paged'"
            )

    @classmethod
    def from_flat(cls, **flat: Any) -> EngineConfig:
        """A config from flat option names, as the edges spell them (claims.yaml's ``engine``
        params, the CLI, a run's meta.json): each option lands in its section (SECTION_OF).
        The inverse of ``flat()``; an unknown option is a TypeError."""
        sections = sorted(set(flat) & set(SECTIONS))
        if sections:
            raise TypeError(f"EngineConfig.from_flat takes flat options, got section(s) {sections}")
        return cls(**flat)

    def flat(self) -> dict[str, Any]:
        """Every option by its flat name, in KNOBS order (the inverse of ``from_flat``)."""
        return {name: getattr(getattr(self, SECTION_OF[name]), name) for name in KNOBS}

    def policy_params(self) -> PolicyParams:
        """What the orderings and victim policies read from this config."""
        return self.scheduler.policy_params()

    @property
    def spec_tokens(self) -> int:
        """Draft tokens per sequence a step verifies: num_spec_tokens, or 0 without speculation."""
        return 0 if self.spec.speculative == "none" else self.spec.num_spec_tokens

    def resolved_async_scheduling(self, platform: str) -> bool:
        """async_scheduling, or where it is None the default for ``platform`` (a
        jax.default_backend() name)."""
        if self.scheduler.async_scheduling is None:
            return ASYNC_SCHEDULING_DEFAULT.get(platform, False)
        return self.scheduler.async_scheduling

    @property
    def pages_per_seq(self) -> int:
        """Block-table width: pages of a max_model_len request (fixed, so shapes are static)."""
        return -(-self.scheduler.max_model_len // self.cache.page_size)


def _one_of(name: str, value: Any, allowed: tuple[Any, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} {value!r} is not one of {allowed}")


def _positive(config: Any, *names: str) -> None:
    for name in names:
        if getattr(config, name) <= 0:
            raise ValueError(f"{name} must be > 0, got {getattr(config, name)}")


def _as_float(value: str | float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def knob_rows() -> list[dict[str, Any]]:
    """EngineConfig's options in KNOBS order, as JSON-ready rows: name, default, ``changes``
    ("runtime": LLMEngine.reset switches it; "new engine": it shapes compiled steps, weights
    or the pool) and description (what `claimbench engine knobs` prints)."""
    defaults = EngineConfig().flat()
    return [
        {
            "name": name,
            "default": json.loads(json.dumps(defaults[name], default=str)),
            "changes": "runtime" if knob.runtime else "new engine",
            "description": knob.description,
        }
        for name, knob in KNOBS.items()
    ]
