"""ledger.run_claims, called directly: selecting claims, the budget gate's verdict, and a batch
run where one claim fails, one is interrupted, or the ledger cannot take a stored run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from claimbench.harness.claims import load_claims
from claimbench.ledger import budget, ledger
from claimbench.ledger.prices import MachinePrice
from claimbench.ledger.run_claims import (
    RunInterrupted,
    RunRefused,
    admit,
    run_claims,
    select_claims,
)
from claimbench.ledger.spend_gate import SpendPlan

CPU = MachinePrice(0.0, 1, "cpu", "")
V6E = MachinePrice(2.70, 1, "list price", "2026-11-29")
STATUS = budget.BudgetStatus(budget_usd=100.0, spent_usd=99.0, num_runs=1, device_s=10.0)


def test_select_all_passes_over_claims_without_an_experiment(project: Path) -> None:
    claims = load_claims(project)
    chosen = select_claims(project, claims, [], all_claims=True)
    assert "fake-unwritten" not in [c.id for c in chosen.claims]
    assert chosen.skipped == ["skipping fake-unwritten: no experiment yet"]
    named = select_claims(project, claims, ["fake-fail", "fake-pass", "fake-fail"], False)
    assert [c.id for c in named.claims] == ["fake-fail", "fake-pass"] and named.skipped == []


@pytest.mark.parametrize(
    ("ids", "all_claims", "message"),
    [
        (["fake-pass"], True, "not both"),
        ([], False, "name the claims to run"),
        (["nope"], False, "nope"),
        (["fake-unwritten"], False, "experiments/fake_unwritten.py does not exist"),
    ],
)
def test_a_bad_selection_is_refused(project: Path, ids, all_claims, message) -> None:
    with pytest.raises(RunRefused, match=message):
        select_claims(project, load_claims(project), ids, all_claims)


def plan(price: MachinePrice, *, unpriced: str | None = None, refusal: str | None = None):
    return SpendPlan(price, unpriced, refusal, 5.40, STATUS)


def test_the_gate_refuses_unless_told_and_says_what_it_let_through() -> None:
    assert admit(plan(CPU), over_budget=False).notice is None  # unmetered: nothing to say
    fits = admit(plan(V6E), over_budget=False)
    assert fits.price == V6E
    assert fits.notice == (
        "estimated cost $5.40 at 2.70 USD/hour (list price); remaining $1.00 of $100.00"
    )
    over = plan(V6E, refusal="estimated cost $5.40 exceeds the remaining budget $1.00")
    with pytest.raises(RunRefused, match="exceeds the remaining budget"):
        admit(over, over_budget=False)
    assert admit(over, over_budget=True).notice.endswith(" [over budget]")
    nan = MachinePrice(math.nan, 1, "unpriced", "")
    with pytest.raises(RunRefused, match="no price for x; --over-budget runs it unpriced"):
        admit(plan(nan, unpriced="no price for x"), over_budget=False)
    assert admit(plan(nan, unpriced="no price for x"), True).notice.startswith("warning:")


def run_batch(project: Path, ids: list[str], **hooks):
    selected = select_claims(project, load_claims(project), ids, False).claims
    kwargs = dict(profile="quick", trials=None, seed=0, dtype="float32")
    store = project / "results"
    return store, run_claims(selected, root=project, store=store, price=CPU, **kwargs, **hooks)


def test_a_failed_claim_is_not_stored_and_the_next_one_runs(project: Path) -> None:
    started, progress = [], []

    def on_start(claim):
        started.append(claim.id)
        return lambda done, total: progress.append((claim.id, done, total))

    heard = []
    store, outcomes = run_batch(
        project, ["fake-broken", "fake-pass"], on_start=on_start, on_outcome=heard.append
    )
    broken, passed = outcomes
    assert heard == outcomes and started == ["fake-broken", "fake-pass"]
    assert broken.run_dir is None and broken.error == "RuntimeError: the fake engine fell over"
    assert passed.ok and passed.run_dir.is_dir()
    assert ("fake-pass", 3, 3) in progress  # the trial bar hears each trial
    assert ledger.read_ledger(store)["run_id"].tolist() == [passed.run_dir.name]


def test_a_stored_run_the_ledger_cannot_take_is_kept_and_reported(project: Path) -> None:
    store = project / "results"
    store.mkdir()
    ledger.ledger_path(store).write_bytes(b"not parquet")
    _, (outcome,) = run_batch(project, ["fake-pass"])
    assert outcome.run_dir is not None and outcome.run_dir.is_dir()
    assert "not a readable ledger" in outcome.error
    assert ledger.ledger_path(store).read_bytes() == b"not parquet"  # left as it was


def test_ctrl_c_names_the_claim_and_the_runs_kept(interrupting_project: Path) -> None:
    with pytest.raises(RunInterrupted) as stop:
        run_batch(interrupting_project, ["fake-pass", "fake-broken", "fake-fail"])
    assert (stop.value.claim_id, stop.value.num_stored) == ("fake-broken", 1)
    runs = sorted((interrupting_project / "results" / "runs").iterdir())
    assert len(runs) == 1  # fake-fail never started; fake-broken left nothing


@pytest.mark.slow
def test_each_claims_compiled_programs_are_freed_before_the_next(project: Path, monkeypatch):
    # A long `run --all` in one process kept every claim's executables and crashed on the
    # kernel's memory-map limit; each claim's programs now go when it ends, failed or not.
    import jax

    cleared = []
    monkeypatch.setattr(jax, "clear_caches", lambda: cleared.append(True))
    events = []

    def on_start(claim):
        events.append(f"start {claim.id} after {len(cleared)} clears")

    _, outcomes = run_batch(project, ["fake-broken", "fake-pass"], on_start=on_start)
    assert len(outcomes) == 2 and len(cleared) == 2
    assert events == ["start fake-broken after 0 clears", "start fake-pass after 1 clears"]


def test_a_ctrl_c_while_a_stored_run_is_appended_waits_for_its_ledger_row(
    project: Path, monkeypatch
) -> None:
    # The run is stored first; a Ctrl-C between that and its row (a cancelled MCP job's
    # repeated signal) left a run the budget gate never counted.
    import os
    import signal

    real_append = ledger.append_rows

    def ctrl_c_then_append(store, rows):
        os.kill(os.getpid(), signal.SIGINT)  # arrives during the append
        return real_append(store, rows)

    monkeypatch.setattr(ledger, "append_rows", ctrl_c_then_append)
    try:
        run_batch(project, ["fake-pass", "fake-fail"])
    except RunInterrupted as err:
        stop = err
    except KeyboardInterrupt:  # caught here, so a regression fails this test, not the session
        pytest.fail("the Ctrl-C broke into the ledger append")
    else:
        pytest.fail("the Ctrl-C was lost")
    assert (stop.claim_id, stop.num_stored, stop.stored_last) == (
        "fake-pass",
        1,
        True,
    )
    (run,) = (project / "results" / "runs").iterdir()
    assert ledger.read_ledger(project / "results")["run_id"].tolist() == [run.name]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
