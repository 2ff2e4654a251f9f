"""`claimbench run`: run claims' experiments and store each run under results/runs/."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from claimbench.cli import project
from claimbench.cli.common import console, fail, global_options
from claimbench.harness import registry
from claimbench.harness.claims import Claim, ClaimsError, find_claim
from claimbench.harness.context import run_claim
from claimbench.ledger import budget, ledger, spend_gate
from claimbench.ledger.prices import MachinePrice
from claimbench.models.provenance import ModelDirError, check_model_dir


class Profile(StrEnum):
    """A claim's params profile (claims.PROFILES)."""

    quick = "quick"
    full = "full"


def _select(root: Path, claims: list[Claim], ids: list[str], all_claims: bool) -> list[Claim]:
    """The claims to run, in order; exits 2 on a bad selection before anything runs."""
    if all_claims and ids:
        fail("use either --claim ID ... or --all, not both")
    if not all_claims and not ids:
        fail("name the claims to run with --claim ID (repeatable) or use --all")
    if all_claims:
        selected = []
        for claim in claims:
            if registry.has_experiment(root, claim):
                selected.append(claim)
            else:
                console.print(f"skipping {claim.id}: {registry.NO_EXPERIMENT}", highlight=False)
        return selected
    selected = []
    for claim_id in dict.fromkeys(ids):
        try:
            claim = find_claim(claims, claim_id)
        except ValueError as err:
            fail(str(err))
        if not registry.has_experiment(root, claim):
            path = registry.experiment_path(root, claim).relative_to(root)
            fail(f"claim {claim.id!r}: {registry.NO_EXPERIMENT} ({path} does not exist)")
        selected.append(claim)
    return selected


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def _check_budget(
    root: Path, store: Path, selected: list[Claim], profile: str, trials: int | None, over: bool
) -> MachinePrice:
    """Price this machine and estimate the work; exit 2 (one line, both numbers) when it would
    exceed the remaining budget, unless ``over``. Returns the price each run is logged at."""
    try:
        plan = spend_gate.plan_spend(root, store, selected, profile, trials)
    except (ClaimsError, ledger.LedgerError) as err:  # a corrupt ledger stops the run first
        fail(str(err))
    if plan.unpriced_reason is not None:
        if not over:
            fail(f"{plan.unpriced_reason}; --over-budget runs it unpriced")
        console.print(
            f"warning: {plan.unpriced_reason}; running unpriced", highlight=False, markup=False
        )
        return plan.price
    if plan.refusal is not None and not over:
        fail(plan.refusal)
    status = plan.status
    if plan.price.usd_per_hour > 0:
        console.print(
            f"estimated cost {budget.fmt_usd(plan.estimated_usd)} at "
            f"{plan.price.usd_per_hour:.2f} USD/hour ({plan.price.source}); remaining "
            f"{budget.fmt_usd(status.remaining_usd)} of {budget.fmt_usd(status.budget_usd)}"
            + (" [over budget]" if plan.refusal else ""),
            highlight=False,
            markup=False,
        )
    return plan.price


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
    stored run is appended to the ledger (results/ledger.parquet) with what it cost."""
    opts = global_options(ctx)
    if trials is not None and trials < 1:
        fail(f"--trials must be >= 1, got {trials}")
    if opts.model is not None:
        # Once, before anything runs: a broken --model would otherwise fail every experiment
        # that loads it, while the ones that never load it would store runs naming it.
        try:
            check_model_dir(opts.model)
        except ModelDirError as err:
            fail(f"--model: {err}")
    claims = project.open_claims(opts.root)
    selected = _select(opts.root, claims, claim or [], all_claims)
    if not selected:
        console.print("nothing to run: no claim has an experiment yet")
        return
    store = project.results_dir(opts.root, results_dir)
    price = _check_budget(opts.root, store, selected, profile.value, trials, over_budget)

    stored: list[Path] = []
    failed: list[str] = []
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        overall = progress.add_task("claims", total=len(selected))
        for c in selected:
            task = progress.add_task(f"{c.id} trials", total=None)

            def on_progress(completed: int, total: int, task=task) -> None:
                progress.update(task, completed=completed, total=total)

            try:
                module = registry.load_experiment(opts.root, c)
                run_dir = run_claim(
                    c,
                    module,
                    root=opts.root,
                    results_dir=store,
                    profile=profile.value,
                    trials=trials,
                    seed=seed,
                    dtype=opts.dtype,
                    model_option=opts.model,
                    on_progress=on_progress,
                )
            except KeyboardInterrupt:
                progress.stop()
                console.print(
                    f"[red]interrupted[/] during {c.id}: that run was not stored; "
                    f"{len(stored)} finished run(s) kept",
                    highlight=False,
                )
                raise typer.Exit(130) from None
            except Exception as err:
                failed.append(c.id)
                progress.remove_task(task)
                progress.console.print(
                    f"[red]error:[/] {c.id} failed, not stored: {escape(_one_line(err))}",
                    highlight=False,
                )
            else:
                stored.append(run_dir)
                progress.console.print(f"stored {run_dir}", highlight=False, markup=False)
                try:
                    ledger.append_rows(store, [ledger.row_for_run(run_dir, price)])
                except (ledger.LedgerError, OSError) as err:
                    failed.append(c.id)
                    progress.console.print(
                        f"[red]error:[/] {c.id}: stored, but not in the ledger: {escape(str(err))}",
                        highlight=False,
                    )
            progress.advance(overall)
    console.print(f"{len(stored)} run(s) stored, {len(failed)} failed", highlight=False)
    if failed:
        raise typer.Exit(1)
