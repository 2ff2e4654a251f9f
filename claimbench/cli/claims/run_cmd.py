"""`claimbench run`: run claims' experiments and store each run under results/runs/."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from claimbench.cli import project
from claimbench.cli.common import console, fail, global_options
from claimbench.harness import evidence_rules
from claimbench.harness.claims import Claim
from claimbench.harness.sequential_run import BlockGate
from claimbench.harness.stopping import StoppingRule
from claimbench.ledger import metered_lock, spend_gate
from claimbench.ledger.run_claims import (
    Admission,
    Outcome,
    RunInterrupted,
    RunRefused,
    admit,
    run_claims,
    select_claims,
)
from claimbench.models.provenance import ModelDirError, check_model_dir
from claimbench.ops import service


def _columns() -> tuple[ProgressColumn, ...]:
    """A fresh set per bar: a column keeps its own state (the spinner's frame)."""
    return (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )


DEFAULT_MAX_TRIALS = 20
# Environment variables that swap the kernels a step runs (native or XLA, the decode loop, the
# build's target CPU). Neither the design hash nor the run's record sees them, so a run under
# one would pool with the default kernels' runs as the same design: claims run without them
# (benchmarks/ compare kernels side by side).
KERNEL_OVERRIDES = (
    "CLAIMBENCH_NATIVE",
    "CLAIMBENCH_NATIVE_PREFILL",
    "CLAIMBENCH_NATIVE_DENSE",
    "CLAIMBENCH_NATIVE_DECODE",
    "CLAIMBENCH_NATIVE_MARCH",
)


class Profile(StrEnum):
    """A claim's params profile (claims.PROFILES)."""

    quick = "quick"
    full = "full"


def run(
    ctx: typer.Context,
    claim: Annotated[
        list[str] | None,
        typer.Option("--claim", metavar="ID", help="A claim id to run (repeatable)."),
    ] = None,
    all_claims: Annotated[
        bool, typer.Option("--all", help="Run every claim that has an experiment.")
    ] = False,
    profile: Annotated[
        Profile, typer.Option(help="quick (a 2-core CPU, minutes) or full (a TPU VM).")
    ] = Profile.quick,
    trials: Annotated[
        int | None, typer.Option(help="Trials per claim (default: the profile's, else 3).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for workloads and sampling.")] = 0,
    results_dir: Annotated[
        Path | None, typer.Option(help="Results store (default: <root>/results).")
    ] = None,
    until_decided: Annotated[
        bool,
        typer.Option(
            "--until-decided",
            help="Run trials a block at a time until every measured condition is decided by "
            "its anytime-valid confidence sequence, or a cap is reached (docs/scoreboard.md).",
        ),
    ] = False,
    max_trials: Annotated[
        int | None,
        typer.Option(help="With --until-decided: the most trials per claim (default 20)."),
    ] = None,
    max_minutes: Annotated[
        float | None,
        typer.Option(help="With --until-decided: stop a claim after this many minutes."),
    ] = None,
    over_budget: Annotated[
        bool,
        typer.Option(
            "--over-budget",
            help="Run even when the estimated cost exceeds the remaining budget, or when this "
            "accelerator has no price (its runs are then logged with unknown dollars).",
        ),
    ] = False,
) -> None:
    """Run claims' experiments; each finished run is stored, a failed one is not, and each
    stored run is appended to the ledger (results/ledger/) with what it cost."""
    opts = global_options(ctx)
    overrides = [name for name in KERNEL_OVERRIDES if name in os.environ]
    if overrides:
        fail(
            f"{', '.join(overrides)} set: claims are measured on the default kernels (the run "
            "would not record the swap); unset it, or compare kernels with benchmarks/"
        )
    if trials is not None and trials < 1:
        fail(f"--trials must be >= 1, got {trials}")
    rule = _stopping_rule(until_decided, trials, max_trials, max_minutes, profile.value)
    if opts.model is not None:
        _check_model(opts.model)
    claims = project.open_claims(opts.root)
    try:
        selection = select_claims(opts.root, claims, claim or [], all_claims)
    except RunRefused as err:
        fail(str(err))
    for line in selection.skipped:
        console.print(line, highlight=False)
    if not selection.claims:
        console.print("nothing to run: no claim has an experiment yet")
        return
    # A new --results-dir is created: run starts a store where the others read one.
    store = project.writable_store(project.results_dir(opts.root, results_dir, must_exist=False))
    with ExitStack() as metered:
        admission = _admit(
            metered, opts.root, store, selection.claims, profile.value, trials, over_budget
        )
        if admission.notice is not None:
            console.print(admission.notice, highlight=False, markup=False)
        outcomes = _run_with_bars(
            selection.claims,
            root=opts.root,
            store=store,
            price=admission.price,
            profile=profile.value,
            trials=trials,
            seed=seed,
            dtype=opts.dtype,
            model_option=opts.model,
            stopping_rule=rule,
            gate_for=_gate_for(opts.root, store, profile.value, over_budget) if rule else None,
        )
    stored = sum(o.run_dir is not None for o in outcomes)
    failed = sum(not o.ok for o in outcomes)
    console.print(f"{stored} run(s) stored, {failed} failed", highlight=False)
    if failed:
        raise typer.Exit(1)


def _admit(
    metered: ExitStack,
    root: Path,
    store: Path,
    selected: list[Claim],
    profile: str,
    trials: int | None,
    over_budget: bool,
) -> Admission:
    """The budget gate's verdict; on a metered machine, first the store's metered-run lock,
    kept in ``metered`` for the whole run (ledger/metered_lock.py), with the plan made again
    under it: a metered run that ended meanwhile has spent. Any refusal exits non-zero with
    one line; a corrupt ledger or claims.yaml stops the run here, before any work."""
    try:
        plan = service.spend_plan(root, store, selected, profile, trials)
        if plan.metered:
            metered.enter_context(metered_lock.held(store))
            plan = service.spend_plan(root, store, selected, profile, trials)
        return admit(plan, over_budget)
    except (service.ServiceError, RunRefused, metered_lock.MeteredRunBusy) as err:
        fail(str(err))


def _stopping_rule(
    until_decided: bool,
    trials: int | None,
    max_trials: int | None,
    max_minutes: float | None,
    profile: str,
) -> StoppingRule | None:
    """The sequential rule --until-decided asks for: blocks of --trials (default: the profile's
    fewest for timing metrics), at most --max-trials and --max-minutes. None without it."""
    if not until_decided:
        if max_trials is not None or max_minutes is not None:
            fail("--max-trials and --max-minutes go with --until-decided")
        return None
    block = trials if trials is not None else evidence_rules.MIN_TIMING_TRIALS[profile]
    cap = DEFAULT_MAX_TRIALS if max_trials is None else max_trials
    try:
        return StoppingRule(block_trials=block, max_trials=cap, max_minutes=max_minutes)
    except ValueError as err:
        fail(f"--until-decided: {err} (blocks are --trials)")


def _gate_for(
    root: Path, store: Path, profile: str, over_budget: bool
) -> Callable[[Claim], BlockGate] | None:
    """Each claim's gate before a further block; --over-budget runs past it."""
    if over_budget:
        return None
    return lambda claim: spend_gate.block_gate(root, store, claim, profile)


def _check_model(model: Path) -> None:
    """Once, before anything runs: a broken --model would otherwise fail every experiment that
    loads it, while the ones that never load it would store runs naming it."""
    try:
        check_model_dir(model)
    except ModelDirError as err:
        fail(f"--model: {err}")


def _run_with_bars(selected: list[Claim], **options: Any) -> list[Outcome]:
    """run_claims under progress bars; Ctrl-C exits 130 saying what was kept."""
    with Progress(*_columns(), console=console) as progress:
        try:
            return run_claims(
                selected, **options, **ProgressReport(progress, len(selected)).hooks()
            )
        except RunInterrupted as stop:
            progress.stop()
            what = "it was stored" if stop.stored_last else "that run was not stored"
            console.print(
                f"[red]interrupted[/] during {escape(stop.claim_id)}: {what}; "
                f"{stop.num_stored} finished run(s) kept",
                markup=True,
                highlight=False,
            )
            raise typer.Exit(130) from None


class ProgressReport:
    """A bar over the claims and one over each claim's trials; a line per stored or failed run."""

    def __init__(self, progress: Progress, num_claims: int) -> None:
        self.progress = progress
        self.overall = progress.add_task("claims", total=num_claims)
        self.task: TaskID | None = None

    def hooks(self) -> dict[str, Callable]:
        return {"on_start": self.on_start, "on_outcome": self.on_outcome}

    def on_start(self, claim: Claim) -> Callable[[int, int], None]:
        task = self.task = self.progress.add_task(f"{claim.id} trials", total=None)

        def on_progress(completed: int, total: int) -> None:
            self.progress.update(task, completed=completed, total=total)

        return on_progress

    def on_outcome(self, outcome: Outcome) -> None:
        out = self.progress.console
        if outcome.run_dir is None:
            self.progress.remove_task(self.task)
            out.print(
                f"[red]error:[/] {escape(outcome.claim_id)} failed, not stored: "
                f"{escape(outcome.error)}",
                markup=True,
                highlight=False,
            )
        else:
            out.print(f"stored {outcome.run_dir}", highlight=False, markup=False)
            if outcome.error is not None:
                out.print(
                    f"[red]error:[/] {escape(outcome.claim_id)}: stored, but not in the ledger: "
                    f"{escape(outcome.error)}",
                    markup=True,
                    highlight=False,
                )
        self.progress.advance(self.overall)
