"""RunContext: what an experiment's ``run(ctx)`` gets, and the lifecycle of one stored run."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pandas as pd

from claimbench.hardware import detection
from claimbench.harness import evidence_rules, provenance, results
from claimbench.harness.claims import Claim
from claimbench.harness.design import design_of
from claimbench.harness.registry import experiment_path
from claimbench.harness.sequential_run import BlockGate, run_blocks
from claimbench.harness.stopping import StoppingRule
from claimbench.models import provenance as model_provenance
from claimbench.tpucompile.pool_fit import HBM_UTILIZATION

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine

DEFAULT_TRIALS = 3  # the fewest trials scoring accepts for a verdict
# The persistent compilation cache experiments share; CLAIMBENCH_COMPILE_CACHE moves it (the
# test suite points it at one temporary directory per run).
COMPILE_CACHE_DIR = Path(
    os.environ.get("CLAIMBENCH_COMPILE_CACHE") or Path.home() / ".cache" / "claimbench" / "xla"
)
ANALYTIC_TRIAL = 0  # analytic values are recorded once, on this row


def merge_params(defaults: dict[str, Any], given: dict[str, Any], where: str) -> dict[str, Any]:
    """``defaults`` with ``given`` on top; a key of ``given`` not in ``defaults`` is an error.

    One level deep: a dict-valued default (``engine``) is replaced whole, and its keys are
    checked by whatever consumes it (EngineConfig). ``trials`` is the harness's, always allowed.
    """
    unknown = sorted(set(given) - set(defaults) - {"trials"})
    if unknown:
        raise ValueError(
            f"{where}: unknown param(s) {unknown}; known: {sorted(defaults)} (claims.yaml params)"
        )
    return {**defaults, **{k: v for k, v in given.items() if k != "trials"}}


@dataclass
class TrialProgress:
    """Trials finished so far; ``on_change(completed, total)`` drives the CLI's progress bar."""

    total: int
    on_change: Callable[[int, int], None] | None = None
    completed: int = 0

    def advance(self, num_trials: int = 1) -> None:
        """Mark ``num_trials`` more trials as finished."""
        self.reach(self.completed + num_trials)

    def reach(self, completed: int) -> None:
        """Mark at least ``completed`` trials as finished (never moves backwards)."""
        completed = min(completed, self.total)
        if completed > self.completed:
            self.completed = completed
            if self.on_change is not None:
                self.on_change(completed, self.total)


@dataclass
class RunContext:
    """One run of one claim's experiment: its knobs, and where its measurements go.

    Experiments loop ``for trial in range(ctx.trials)`` and call ``ctx.record`` for every metric
    their claim's conditions name; recording a value for trial t marks trials < t as finished.
    """

    claim_id: str
    profile: str  # quick | full
    params: dict[str, Any]  # the claim's params for this profile
    trials: int
    seed: int
    hardware: dict[str, Any]  # detection.detect_hardware()
    dtype: str  # model compute dtype: bfloat16 | float32
    model_option: Path | None = None  # --model; None = the shipped claimbench-tiny
    progress: TrialProgress | None = None  # None: a silent one over ``trials``
    _rows: list[dict[str, Any]] = field(default_factory=list, repr=False)
    # Every engine the experiment built, as the resolved EngineConfig's fields (provenance).
    engine_configs: list[dict[str, Any]] = field(default_factory=list, repr=False)
    _frames: dict[str, list[pd.DataFrame]] = field(default_factory=dict, repr=False)
    # Model directories the experiment used (engines built, model_path read), first use first.
    _models_used: list[Path] = field(default_factory=list, repr=False)
    # Trials of earlier blocks of a sequential run (harness/sequential_run.py): the experiment
    # records trial t of this block, stored as trial_offset + t.
    trial_offset: int = 0

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise ValueError(f"trials must be >= 1, got {self.trials}")
        if self.progress is None:
            self.progress = TrialProgress(total=self.trials)

    @property
    def model_path(self) -> Path:
        """The model directory experiments load: --model, or the shipped default.

        Reading it counts as using the model: the run's provenance records it.
        """
        return self._use_model(self.model_option)

    @property
    def models_used(self) -> list[Path]:
        """The model directories this run used so far, in order of first use."""
        return list(self._models_used)

    def _use_model(self, path: Path | None) -> Path:
        """Note that the experiment uses ``path`` (None: the shipped default); return it."""
        if path is None:
            from claimbench.models.checkpoint import default_model_path

            path = default_model_path()
        path = Path(path)
        if all(path.resolve() != used.resolve() for used in self._models_used):
            self._models_used.append(path)
        return path

    @property
    def evidence(self) -> str:
        """The hardware class measurements default to: this run's platform."""
        return self.hardware["platform"]

    def record(
        self,
        metric: str,
        value: float,
        *,
        trial: int,
        unit: str = "",
        evidence: str | None = None,
        **labels: Any,
    ) -> None:
        """Store one measured (or, with evidence="analytic", computed) value of ``metric``.

        ``trial`` is 0-based and < ``trials``; ``labels`` (JSON-serialisable) tell apart several
        values of one metric in a trial, which scoring averages.
        """
        if not metric:
            raise ValueError("metric must be a non-empty name")
        if not 0 <= trial < self.trials:
            raise ValueError(f"trial must be in [0, {self.trials}), got {trial}")
        trial += self.trial_offset
        evidence = evidence or self.evidence
        if evidence not in provenance.EVIDENCE_CLASSES:
            raise ValueError(f"evidence {evidence!r} is not one of {provenance.EVIDENCE_CLASSES}")
        number = float(value)
        if math.isnan(number):
            raise ValueError(f"metric {metric!r} trial {trial}: value is NaN")
        self._rows.append(
            {
                "_key": None,
                "claim_id": self.claim_id,
                "trial": trial,
                "metric": metric,
                "value": number,
                "unit": unit,
                "evidence": evidence,
                "labels": json.dumps(labels, sort_keys=True, default=str),
            }
        )
        self.progress.reach(trial)

    def record_realised_load(
        self,
        trial: int,
        realised_over_service: float,
        *,
        target: float,
        tolerance: float,
        **labels: Any,
    ) -> bool:
        """Store the load ``trial`` really offered, over the measured service rate (metric
        ``realised_load``, unit "x"), and whether it was on ``target``.

        On target: ``|realised / target - 1| <= tolerance``. A trial off target did not run the
        design: it also records ``trial_off_target`` = 1, and scoring drops every value of that
        trial and reports it as failed to run. Returns whether the trial is on target.
        """
        realised = float(realised_over_service)
        if not realised > 0:
            raise ValueError(f"trial {trial}: realised load must be > 0, got {realised}")
        hit = evidence_rules.on_target(realised, target, tolerance)
        self.record(
            evidence_rules.REALISED_LOAD,
            realised,
            trial=trial,
            unit="x",
            target=target,
            tolerance=tolerance,
            **labels,
        )
        if not hit:
            self.record(evidence_rules.OFF_TARGET, 1.0, trial=trial, realised=realised)
        return hit

    def merged(self, defaults: dict[str, Any]) -> dict[str, Any]:
        """This profile's params over the experiment's ``defaults``; an unknown key (a typo in
        claims.yaml) is a ValueError naming it."""
        return merge_params(defaults, self.params, f"claim {self.claim_id!r}")

    def engine(
        self, *, precompile: bool = False, compile_cache: bool = False, **overrides: Any
    ) -> LLMEngine:
        """The one engine factory: an LLMEngine from the run's model, dtype and seed, the
        profile's ``engine`` params, then ``overrides``.

        ``precompile`` compiles every bucket before anything is timed; ``compile_cache`` keeps
        compiled steps in the persistent cache (COMPILE_CACHE_DIR), so the next experiment in a
        new process loads them instead of compiling. The resolved config is kept for provenance.
        """
        import dataclasses

        from claimbench.engine.build import build_engine
        from claimbench.engine.config import EngineConfig
        from claimbench.kernels.backend import resolve_backend_name

        options = {"model_path": self.model_option, "dtype": self.dtype, "seed": self.seed}
        options |= self.params.get("engine", {}) | overrides
        if compile_cache:
            options.setdefault("compilation_cache_dir", COMPILE_CACHE_DIR)
        utilization = options.pop(HBM_UTILIZATION, None)
        config = EngineConfig.from_flat(**options)
        self._use_model(config.model.model_path)
        if config.spec.speculative == "draft":  # the draft's weights are the run's too
            from claimbench.models.checkpoint import default_draft_path

            self._use_model(config.spec.draft_model_path or default_draft_path())
        fit = None
        if utilization is not None:
            # The pool from the chip's HBM (vLLM's gpu_memory_utilization): tpucompile/pool_fit.py.
            from claimbench.models.checkpoint import read_config
            from claimbench.tpucompile.pool_fit import run_pool

            model_cfg = read_config(self._use_model(config.model.model_path))
            fit = run_pool(model_cfg, config, utilization, self.hardware)
            if not fit.fits:
                raise ValueError(fit.describe())
            config = dataclasses.replace(config, kv_pool_bytes=fit.pool_bytes)
        engine = build_engine(config)
        resolved = config.flat()
        resolved["attention_backend_resolved"] = resolve_backend_name(
            config.model.attention_backend
        )
        if fit is not None:
            resolved["kv_pool_fit"] = dataclasses.asdict(fit)
        self.engine_configs.append(json.loads(json.dumps(resolved, default=str)))
        if precompile:
            engine.precompile()
        return engine

    def record_analytic(
        self, metric: str, value: float, *, unit: str = "", inputs: dict[str, Any], **labels: Any
    ) -> None:
        """Store the value of an arithmetic metric once, with the inputs of its formula.

        Analytic values are exact: they are never repeated per trial (which would fake a
        zero-width interval) and only decide conditions marked ``basis: analytic``.
        """
        key = json.dumps(labels, sort_keys=True, default=str)
        if any(
            r["metric"] == metric and r["evidence"] == "analytic" and r["_key"] == key
            for r in self._rows
        ):
            if self.trial_offset:
                return  # a later block of a sequential run computes the same arithmetic again
            raise ValueError(f"analytic metric {metric!r} {labels} is already recorded")
        self.record(
            metric,
            value,
            trial=ANALYTIC_TRIAL,
            unit=unit,
            evidence="analytic",
            inputs=inputs,
            **labels,
        )
        self._rows[-1]["_key"] = key
        self._rows[-1]["trial"] = ANALYTIC_TRIAL

    def save_frames(
        self,
        requests: pd.DataFrame | None = None,
        steps: pd.DataFrame | None = None,
        **labels: Any,
    ) -> None:
        """Keep an engine run's per-request and per-step frames, tagged with label columns.

        One run may save several (e.g. ``mode="fcfs"`` and ``mode="vtc"``); they are stacked.
        """
        for name, frame in (("requests", requests), ("steps", steps)):
            if frame is None:
                continue
            clash = sorted(set(labels) & set(frame.columns))
            if clash:
                raise ValueError(f"labels {clash} clash with columns of the {name} frame")
            if self.trial_offset and "trial" in frame.columns:
                frame = frame.assign(trial=frame["trial"] + self.trial_offset)
            if self.trial_offset and isinstance(labels.get("trial"), int):
                labels = {**labels, "trial": labels["trial"] + self.trial_offset}
            self._frames.setdefault(name, []).append(frame.assign(**labels))

    def measurements_frame(self, run_id: str) -> pd.DataFrame:
        """Everything recorded, as rows of results.MEASUREMENT_COLUMNS."""
        rows = [{k: v for k, v in r.items() if k != "_key"} for r in self._rows]
        frame = pd.DataFrame(rows, columns=list(results.MEASUREMENT_COLUMNS)[1:])
        frame.insert(0, "run_id", run_id)
        return frame.astype({"trial": "int64", "value": "float64"})

    def frames(self) -> dict[str, pd.DataFrame]:
        """The saved engine frames, stacked per name."""
        return {name: pd.concat(parts, ignore_index=True) for name, parts in self._frames.items()}


def _distinct(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``configs`` without repeats (each block of a sequential run builds its engines again)."""
    seen: list[dict[str, Any]] = []
    for config in configs:
        if config not in seen:
            seen.append(config)
    return seen


def run_claim(
    claim: Claim,
    module: ModuleType,
    *,
    root: Path,
    results_dir: Path,
    profile: str,
    trials: int | None,
    seed: int,
    dtype: str,
    model_option: Path | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    stopping_rule: StoppingRule | None = None,
    block_gate: BlockGate | None = None,
) -> Path:
    """Run ``module.run(ctx)`` for ``claim`` and store the run; return its directory.

    ``trials`` None takes the profile's ``trials`` param, else DEFAULT_TRIALS. With a
    ``stopping_rule`` the experiment runs block by block until its conditions are decided
    (harness/sequential_run.py; ``block_gate`` may refuse a further block) and ``trials`` is
    ignored. Whatever the experiment raises (Ctrl-C included) propagates and nothing is stored.
    """
    params = claim.profile_params(profile)
    num_trials = trials if trials is not None else int(params.get("trials", DEFAULT_TRIALS))
    if stopping_rule is not None:
        num_trials = stopping_rule.max_trials
    # As the claim stood when the run started: a later edit of claims.yaml shows as a changed hash.
    prediction = {
        "conditions": [c.model_dump(exclude_none=True) for c in claim.prediction],
        "confidence": claim.confidence,
    }
    prediction_hash = claim.prediction_hash(profile)
    # The code that decides what is measured, as it stands when the run starts (harness/design.py);
    # read from where scoring reads today's, so the two hashes compare like with like.
    experiment_file = experiment_path(root, claim)
    design = design_of(experiment_file).as_meta() if experiment_file.is_file() else {}
    hardware = detection.detect_hardware()
    start = datetime.now(UTC)
    run_id = results.new_run_id(claim.id, start)
    ctx = RunContext(
        claim_id=claim.id,
        profile=profile,
        params=params,
        trials=num_trials,
        seed=seed,
        hardware=hardware,
        dtype=dtype,
        model_option=model_option,
        progress=TrialProgress(total=num_trials, on_change=on_progress),
    )
    if on_progress is not None:
        on_progress(0, num_trials)
    t0 = time.perf_counter()
    stopped = None
    if stopping_rule is None:
        module.run(ctx)
    else:
        price = float(hardware.get("price_per_hour") or 0.0)
        if hardware["platform"] == "cpu":
            price = 0.0  # as below: a CPU is not the metered accelerator
        stopped = run_blocks(
            ctx, module, claim, stopping_rule, gate=block_gate, price_per_hour=price
        )
        num_trials = stopped.num_trials
    wall_s = time.perf_counter() - t0
    end = datetime.now(UTC)
    ctx.progress.reach(num_trials)
    # A CPU is not the metered accelerator the $100 budget pays for.
    device_s = 0.0 if hardware["platform"] == "cpu" else wall_s
    price = float(hardware.get("price_per_hour") or 0.0)
    # Only what the experiment used: an analytic experiment that never loads a model has none.
    models = [model_provenance.describe_model(path) for path in ctx.models_used]
    meta = {
        "run_id": run_id,
        "claim": claim.id,
        "profile": profile,
        "params": params,
        "seed": seed,
        "trials": num_trials,
        # How the trial count was chosen: absent for a fixed count; else the sequential rule,
        # the trials it ran and why it stopped (scoring then uses confidence sequences).
        **({"stopping": stopped.as_meta()} if stopped is not None else {}),
        "prediction_hash": prediction_hash,
        "prediction": prediction,
        "design_hash": None,  # no experiment file: an unknown design, never scored
        **design,
        "model": models[0] if models else None,
        "other_models": models[1:],  # e.g. a draft model for speculative decoding
        "engine_configs": ctx.engine_configs if stopped is None else _distinct(ctx.engine_configs),
        "dtype": dtype,
        "origin": provenance.origin(),
        "git": provenance.git_state(root),
        "hardware": hardware,
        "versions": provenance.library_versions(),
        "start": start.isoformat(),
        "end": end.isoformat(),
        "wall_s": wall_s,
        "device_s": device_s,
        "price_per_hour": price,
        "cost_usd": device_s * price / 3600.0,
    }
    return results.write_run(results_dir, meta, ctx.measurements_frame(run_id), ctx.frames())
