"""Running a batch of claims as `claimbench run` does: which claims, whether the budget lets
the work start, then each claim's run stored and appended to the ledger with what it cost.

A failed claim is reported and the next one runs; Ctrl-C stops the batch, keeping the runs
already stored (the one in progress is not: run_claim stores atomically).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from claimbench.harness import registry
from claimbench.harness.claims import Claim, find_claim
from claimbench.harness.context import run_claim
from claimbench.harness.sequential_run import BlockGate
from claimbench.harness.stopping import StoppingRule
from claimbench.ledger import budget, ledger
from claimbench.ledger.ctrl_c_held import ctrl_c_held
from claimbench.ledger.prices import MachinePrice
from claimbench.ledger.spend_gate import SpendPlan

Progress = Callable[[int, int], None]  # (trials done, trials in all)


class RunRefused(ValueError):
    """The work must not start (a bad selection, or over budget): one line saying why."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a claim's run: that run was not stored (``stored_last``: it was, and
    appended to the ledger, when the Ctrl-C came just after); ``num_stored`` runs were."""

    def __init__(self, claim_id: str, num_stored: int, *, stored_last: bool = False) -> None:
        super().__init__(claim_id)
        self.claim_id = claim_id
        self.num_stored = num_stored
        self.stored_last = stored_last


@dataclass(frozen=True)
class Selection:
    """The claims to run, in order, and a line for each claim --all passed over."""

    claims: list[Claim]
    skipped: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Admission:
    """The budget gate let the work start: the price each run is logged at and what to say."""

    price: MachinePrice
    notice: str | None  # the estimate against the remaining budget, or a warning; None: silent


@dataclass(frozen=True)
class Outcome:
    """One claim's run: stored (``run_dir``) or not, and what went wrong if anything."""

    claim_id: str
    run_dir: Path | None  # None: the experiment failed and nothing was stored
    error: str | None = None  # the failure, or why a stored run is not in the ledger

    @property
    def ok(self) -> bool:
        return self.error is None


def select_claims(root: Path, claims: list[Claim], ids: list[str], all_claims: bool) -> Selection:
    """The claims named by ``ids`` (each once, in order) or, with ``all_claims``, every claim
    that has an experiment. RunRefused before anything runs on a bad selection."""
    if all_claims and ids:
        raise RunRefused("use either --claim ID ... or --all, not both")
    if not all_claims and not ids:
        raise RunRefused("name the claims to run with --claim ID (repeatable) or use --all")
    if all_claims:
        runnable = [c for c in claims if registry.has_experiment(root, c)]
        skipped = [
            f"skipping {c.id}: {registry.NO_EXPERIMENT}"
            for c in claims
            if not registry.has_experiment(root, c)
        ]
        return Selection(runnable, skipped)
    selected = []
    for claim_id in dict.fromkeys(ids):
        try:
            claim = find_claim(claims, claim_id)
        except ValueError as err:
            raise RunRefused(str(err)) from None
        if not registry.has_experiment(root, claim):
            path = registry.experiment_path(root, claim).relative_to(root)
            raise RunRefused(
                f"claim {claim.id!r}: {registry.NO_EXPERIMENT} ({path} does not exist)"
            )
        selected.append(claim)
    return Selection(selected)


def admit(plan: SpendPlan, over_budget: bool) -> Admission:
    """The budget gate's verdict on ``plan``: RunRefused (one line, both numbers) when the work
    would exceed the remaining budget or the machine has no price, unless ``over_budget``."""
    if plan.unpriced_reason is not None:
        if not over_budget:
            raise RunRefused(f"{plan.unpriced_reason}; --over-budget runs it unpriced")
        return Admission(plan.price, f"warning: {plan.unpriced_reason}; running unpriced")
    if plan.refusal is not None and not over_budget:
        raise RunRefused(plan.refusal)
    if plan.price.usd_per_hour <= 0:
        return Admission(plan.price, None)  # an unmetered machine: nothing to say
    status = plan.status
    notice = (
        f"estimated cost {budget.fmt_usd(plan.estimated_usd)} at "
        f"{plan.price.usd_per_hour:.2f} USD/hour ({plan.price.source}); remaining "
        f"{budget.fmt_usd(status.remaining_usd)} of {budget.fmt_usd(status.budget_usd)}"
        + (" [over budget]" if plan.refusal else "")
    )
    return Admission(plan.price, notice)


def one_line(err: BaseException) -> str:
    """An exception as one line: its type and its message's first line."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def run_claims(
    selected: list[Claim],
    *,
    root: Path,
    store: Path,
    price: MachinePrice,
    profile: str,
    trials: int | None,
    seed: int,
    dtype: str,
    model_option: Path | None = None,
    on_start: Callable[[Claim], Progress | None] | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
    stopping_rule: StoppingRule | None = None,
    gate_for: Callable[[Claim], BlockGate] | None = None,
) -> list[Outcome]:
    """Run each claim's experiment, store its run and append it to ``store``'s ledger at
    ``price``. ``on_start`` may return the claim's trial-progress callback; ``on_outcome``
    hears each claim's end. With a ``stopping_rule`` each claim runs until decided, asking
    ``gate_for(claim)`` before every further block. RunInterrupted on Ctrl-C."""
    outcomes: list[Outcome] = []
    for claim in selected:
        on_progress = on_start(claim) if on_start is not None else None
        try:
            module = registry.load_experiment(root, claim)
            run_dir = run_claim(
                claim,
                module,
                root=root,
                results_dir=store,
                profile=profile,
                trials=trials,
                seed=seed,
                dtype=dtype,
                model_option=model_option,
                on_progress=on_progress,
                stopping_rule=stopping_rule,
                block_gate=gate_for(claim) if gate_for is not None else None,
            )
        except KeyboardInterrupt:
            stored = sum(o.run_dir is not None for o in outcomes)
            raise RunInterrupted(claim.id, stored) from None
        except Exception as err:  # one claim's failure never stops the others
            outcome = Outcome(claim.id, None, one_line(err))
        else:
            # The run is stored: its row goes in even if Ctrl-C comes now (ledger/ctrl_c_held.py).
            with ctrl_c_held() as interrupted:
                try:
                    ledger.append_rows(store, [ledger.row_for_run(run_dir, price)])
                    outcome = Outcome(claim.id, run_dir)
                except (ledger.LedgerError, OSError) as err:
                    outcome = Outcome(claim.id, run_dir, str(err))
            if interrupted:
                outcomes.append(outcome)
                if on_outcome is not None:
                    on_outcome(outcome)
                stored = sum(o.run_dir is not None for o in outcomes)
                raise RunInterrupted(claim.id, stored, stored_last=True)
        outcomes.append(outcome)
        release_compiled_programs()
        if on_outcome is not None:
            on_outcome(outcome)
    return outcomes


def release_compiled_programs() -> None:
    """Free the compiled XLA programs a claim left behind. Every CPU executable keeps its own
    memory mappings, and ``run --all`` in one process passed the kernel's vm.max_map_count
    (65,530) after 24 claims: LLVM could not allocate and the process crashed. The next claim
    compiles its own (the persistent compilation cache, where on, makes that a lookup)."""
    import gc

    import jax

    jax.clear_caches()
    gc.collect()
