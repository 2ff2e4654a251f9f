"""The degradation ladder: rungs validated as data, one rung per step with hysteresis, and
each action doing what it says in the engine on deterministic step-driven workloads."""

import dataclasses

import pytest
from engine_helpers import tiny_engine, tiny_model
from typer.testing import CliRunner

from claimbench.cli.main import app
from claimbench.engine.build import build_engine
from claimbench.engine.config import EngineConfig, knob_rows
from claimbench.engine.config_ladder import Action, Rung, Signal, as_ladder, load_ladder
from claimbench.engine.sampling_params import SamplingParams
from claimbench.engine.sched.ladder import LadderState
from claimbench.lab.load.step_driver import serve_by_step
from claimbench.workload.build import WorkloadRequest

Q = Signal.WAITING_REQUESTS


def rung(action, engage=4, release=0, signal=Q, **amounts):
    return Rung(Action(action), signal, engage, release, **amounts)


def req(tier: int, max_tokens: int = 8, prompt_len: int = 8, i: int = 0) -> WorkloadRequest:
    prompt = tuple(3 + (i + j) % 90 for j in range(prompt_len))
    return WorkloadRequest(0.0, f"t{tier}", tier, prompt, max_tokens, i)


def arrivals(*groups: tuple[int, int, int, int]) -> list[tuple[int, WorkloadRequest]]:
    """(arrival step, count, tier, max_tokens) groups as serve_by_step arrivals."""
    out = []
    for step, count, tier, max_tokens in groups:
        out += [(step, req(tier, max_tokens, i=len(out))) for _ in range(count)]
    return out


@pytest.fixture(scope="module")
def engine():
    return tiny_engine()


def served(engine, ladder, work, max_steps=400):
    run = serve_by_step(
        engine, work, max_steps=max_steps, config=dataclasses.replace(engine.config, ladder=ladder)
    )
    frame = engine.requests_frame().set_index("request_id")
    return run.requests.join(frame[["output_tokens", "rejected_reason"]], on="request_id"), run


# -- rungs as data ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"action": "shed", "signal": "waiting_requests"}, "action 'shed' is not one of"),
        ({"action": "disable_speculation", "signal": "queue"}, "signal 'queue' is not one of"),
        ({"engage": 4, "release": 4}, "<= inf for waiting_requests, got release=4"),
        ({"signal": "kv_usage", "engage": 1.5, "release": 0.5}, "engage <= 1 for kv_usage"),
        ({"release": -1}, "got release=-1"),
        ({"action": "shed_tier_at_ingress"}, "shed_tier_at_ingress needs tier"),
        ({"action": "cap_max_tokens", "tier": 1}, "cap_max_tokens needs max_tokens"),
        ({"tier": 1}, "disable_speculation takes no tier, got 1"),
        ({"action": "lower_token_budget", "token_budget": 0}, "must be an integer >= 1, got 0"),
        ({"action": "shed_tier_at_ingress", "tier": 1.5}, "tier must be an integer >= 0"),
        ({"engage": "high"}, "engage must be a number, got 'high'"),
    ],
)
def test_a_bad_rung_names_the_problem_and_its_values(fields, message):
    base = {"action": "disable_speculation", "signal": "waiting_requests", "engage": 4}
    with pytest.raises(ValueError, match="ladder rung") as err:
        as_ladder([{"release": 0, **base, **fields}])
    assert message in str(err.value)


def test_config_takes_a_ladder_as_data_and_checks_it_against_the_budget():
    spec = [
        {"action": "shed_tier_at_ingress", "tier": 2, "signal": "waiting_requests", "engage": 8,
         "release": 2},
        {"action": "lower_token_budget", "token_budget": 64, "signal": "kv_usage", "engage": 0.9,
         "release": 0.5},
    ]  # fmt: skip
    config = EngineConfig(ladder=spec)
    assert config.scheduler.ladder == (
        rung("shed_tier_at_ingress", 8, 2, tier=2),
        rung("lower_token_budget", 0.9, 0.5, Signal.KV_USAGE, token_budget=64),
    )
    with pytest.raises(ValueError, match="token_budget=64.*max_num_batched_tokens=64"):
        EngineConfig(ladder=spec, max_num_seqs=8, max_num_batched_tokens=64)
    with pytest.raises(ValueError, match="unknown fields \\['tiers'\\]"):
        EngineConfig(ladder=[{**spec[0], "tiers": 2}])
    with pytest.raises(ValueError, match="a ladder must be a list of rungs"):
        EngineConfig(ladder="shed")
    ladder_row = {r["name"]: r for r in knob_rows()}["ladder"]
    assert ladder_row["changes"] == "runtime" and ladder_row["default"] == []


def test_load_ladder_reads_a_file_and_names_the_file_when_it_is_bad(tmp_path):
    good = tmp_path / "ladder.yaml"
    good.write_text(
        "ladder:\n"
        "  - {action: shed_tier_at_ingress, tier: 2, signal: waiting_requests,"
        " engage: 8, release: 2}\n"
        "  - {action: disable_speculation, signal: oldest_wait_s, engage: 2.0, release: 0.5}\n"
    )
    assert [r.action for r in load_ladder(good)] == [
        Action.SHED_TIER_AT_INGRESS,
        Action.DISABLE_SPECULATION,
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {action: disable_speculation, signal: kv_usage, engage: 0.5, release: 0.9}\n")
    with pytest.raises(ValueError, match=f"^{bad}: ladder rung disable_speculation needs"):
        load_ladder(bad)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("- {action: cap_max_tokens, tier: 1, signal: kv_usage, engage: 0.9, release: 0.5}",
         "ladder rung cap_max_tokens needs max_tokens"),
        ("ladder: {action: disable_speculation}", "a ladder must be a list of rungs"),
        ("ladder: [", "not valid YAML at line 1"),
        ("\udcff", "is not UTF-8 text"),
    ],
)  # fmt: skip
def test_serve_with_a_bad_ladder_file_fails_in_one_line_before_loading_anything(
    tmp_path, text, words
):
    file = tmp_path / "ladder.yaml"
    file.write_bytes(text.encode("utf-8", "surrogateescape"))  # "\udcff": the byte 0xff
    result = CliRunner().invoke(app, ["serve", "--ladder", str(file)])
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = CliRunner().invoke(app, ["serve", "--ladder", str(tmp_path)])
    assert result.exit_code == 2 and "cannot read the ladder file" in result.output


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "declares no rungs"),
        ("[]", "declares no rungs"),
        ("ladder: []", "declares no rungs"),
        ("rungs: 3", "a mapping must have the one key 'ladder', got ['rungs']"),
        ("tenants: [{name: a}]", "a mapping must have the one key 'ladder', got ['tenants']"),
    ],
)
def test_a_file_that_declares_no_ladder_is_refused(tmp_path, text, words):
    # Each of these once loaded as no rungs at all: `serve --ladder` then ran without one.
    file = tmp_path / "ladder.yaml"
    file.write_text(text)
    with pytest.raises(ValueError) as info:
        load_ladder(file)
    assert str(info.value).startswith(str(file)) and words in str(info.value)


def test_engine_knobs_lists_the_ladder_as_a_runtime_option():
    result = CliRunner().invoke(app, ["engine", "knobs"])
    assert result.exit_code == 0
    row = next(line for line in result.output.splitlines() if " ladder " in line)
    assert "runtime" in row and "degradation" in row


# -- the state machine -----------------------------------------------------------------------


def test_the_ladder_climbs_and_descends_one_rung_per_observation_with_hysteresis():
    state = LadderState(
        (rung("disable_speculation", 4, 1), rung("shed_tier_at_ingress", 10, 6, tier=2))
    )

    def at(q):
        return state.observe({Q: q, Signal.KV_USAGE: 0.0, Signal.OLDEST_WAIT_S: 0.0}, 0.0)

    # A queue of 20 crosses both engage values, but the ladder climbs one rung per step.
    assert [at(q) for q in (3, 20, 20, 20)] == [0, 1, 2, 2]
    # Between release (6) and engage (10) of rung 2 it stays; at 6 it leaves rung 2 only.
    assert [at(q) for q in (8, 6, 3, 2, 1)] == [2, 1, 1, 1, 0]
    # Between rung 1's release (1) and engage (4) it stays off.
    assert [at(q) for q in (3, 2)] == [0, 0]
    assert [(t.from_rung, t.to_rung, t.value) for t in state.transitions] == [
        (0, 1, 20.0),
        (1, 2, 20.0),
        (2, 1, 6.0),
        (1, 0, 1.0),
    ]


def test_the_cuts_in_force_are_those_of_the_rungs_climbed():
    state = LadderState(
        (
            rung("shed_tier_at_ingress", 1, 0, tier=2),
            rung("cap_max_tokens", 2, 0, tier=1, max_tokens=16),
            rung("cap_max_tokens", 3, 0, tier=2, max_tokens=4),
            rung("lower_token_budget", 4, 0, token_budget=100),
        )
    )
    assert state.shed_reason(5) is None and state.max_tokens_cap(1) is None
    assert state.token_budget(512) == 512 and not state.speculation_disabled
    state.rung = 3
    assert state.shed_reason(1) is None
    assert state.shed_reason(3).startswith("tier 3 shed at ingress (ladder_shed=rung 1: ")
    assert [state.max_tokens_cap(t) for t in (0, 1, 2, 3)] == [None, 16, 4, 4]
    assert state.token_budget(512) == 512
    state.rung = 4
    assert state.token_budget(512) == 100 and state.token_budget(64) == 64


# -- the engine acting on it -----------------------------------------------------------------


def test_shedding_rejects_the_tier_at_ingress_only_while_engaged(engine):
    ladder = (rung("shed_tier_at_ingress", 4, 0, tier=1),)
    # 12 tier-0 requests queue at step 0 (8 run at once): the rung engages. Tier-1 requests
    # arriving at step 1 are shed, a tier-0 one is not; at step 80 the queue has long been
    # empty, the rung released, and tier 1 is admitted again.
    work = arrivals((0, 12, 0, 8), (1, 3, 1, 8), (1, 1, 0, 8), (80, 3, 1, 8), (80, 1, 2, 8))
    requests, run = served(engine, ladder, work)
    shed = requests[requests["finish_reason"] == "rejected"]
    assert list(shed["arrival_step"]) == [1, 1, 1] and set(shed["tenant"]) == {"t1"}
    assert shed["rejected_reason"].str.contains("ladder_shed=rung 1").all()
    assert (requests.loc[requests["finish_reason"] != "rejected", "output_tokens"] == 8).all()
    assert len(requests) - len(shed) == 17
    rungs = run.steps["ladder_rung"]
    assert rungs.iloc[0] == 1 and rungs.iloc[-1] == 0 and set(rungs) == {0, 1}
    assert engine.scheduler.admission.num_rejected == {("t1", "ladder_shed"): 3}

    # The same workload without a ladder: nothing is shed, and every step is on rung 0.
    requests, run = served(engine, (), work)
    assert (requests["finish_reason"] == "length").all()
    assert (run.steps["ladder_rung"] == 0).all()


def test_capping_caps_the_tier_and_lower_tiers_that_start_while_engaged(engine):
    ladder = (rung("cap_max_tokens", 4, 0, tier=1, max_tokens=2),)
    work = arrivals((0, 12, 0, 8), (0, 3, 1, 8), (0, 2, 2, 8), (80, 2, 1, 8))
    requests, run = served(engine, ladder, work)
    assert (requests["finish_reason"] == "length").all()
    out = requests.groupby(["arrival_step", "tenant"])["output_tokens"].apply(list).to_dict()
    assert out == {
        (0, "t0"): [8] * 12,  # tier 0 is above the rung's tier
        (0, "t1"): [2] * 3,
        (0, "t2"): [2] * 2,  # a lower tier than the rung's is capped too
        (80, "t1"): [8] * 2,  # started after the rung released
    }
    assert run.steps["ladder_rung"].iloc[0] == 1 and run.steps["ladder_rung"].iloc[-1] == 0
    requests, _ = served(engine, (), work)
    assert (requests["output_tokens"] == 8).all()


def test_lowering_the_token_budget_bounds_each_step_while_engaged(engine):
    ladder = (rung("lower_token_budget", 4, 0, token_budget=12),)
    work = [(0, req(0, 6, prompt_len=20, i=i)) for i in range(12)]
    _, run = served(engine, ladder, work)
    steps = run.steps
    engaged = steps[steps["ladder_rung"] == 1]
    assert len(engaged) > 3 and (engaged["num_scheduled_tokens"] <= 12).all()
    assert (steps["ladder_rung"] == 0).any()
    _, plain = served(engine, (), work)
    assert plain.steps["num_scheduled_tokens"].max() == 32  # the configured budget


def test_climbing_takes_one_rung_per_step_and_each_step_records_its_rung(engine):
    ladder = (
        rung("lower_token_budget", 4, 0, token_budget=24),
        rung("lower_token_budget", 4, 0, token_budget=16),
    )
    _, run = served(engine, ladder, arrivals((0, 16, 0, 4)))
    rungs = list(run.steps["ladder_rung"])
    assert rungs[:3] == [1, 2, 2] and rungs[-1] == 0
    assert list(run.steps["num_scheduled_tokens"][:2]) == [24, 16]
    # Down one rung at a time too: 2 -> 1 -> 0, never 2 -> 0.
    assert all(abs(a - b) <= 1 for a, b in zip(rungs, rungs[1:], strict=False))


@pytest.mark.slow
@pytest.mark.parametrize(("speculative", "draft_seed"), [("ngram", None), ("draft", 1)])
def test_disabling_speculation_stops_drafts_while_engaged_and_changes_no_token(
    speculative, draft_seed
):
    # Prompts that repeat themselves, so prompt lookup (ngram) proposes drafts. A draft
    # model unlike the target (seed 1) has most drafts rejected: a stale draft verified
    # after the rung releases, or a draft model that did not catch up, changes tokens.
    prompts = [[5 + i, 6, 7, 8, 9, 10, 11] * 4 for i in range(12)]
    greedy = SamplingParams(max_tokens=24, ignore_eos=True)
    base = tiny_engine()
    expected = [o.token_ids for o in base.generate(prompts, greedy)]
    config = dataclasses.replace(
        base.config,
        speculative=speculative,
        num_spec_tokens=4,
        ladder=(rung("disable_speculation", 2, 0),),
    )
    draft = None if draft_seed is None else tiny_model(draft_seed)
    engine = build_engine(config, model=tiny_model(), draft_model=draft)
    assert [o.token_ids for o in engine.generate(prompts, greedy)] == expected
    steps = engine.steps_frame()
    engaged = steps[steps["ladder_rung"] == 1]
    assert len(engaged) > 0 and (engaged["num_drafts"] == 0).all()
    assert steps.loc[steps["ladder_rung"] == 0, "num_drafts"].sum() > 0


def test_load_signals_are_the_queue_the_kv_pool_and_the_oldest_wait(engine):
    engine.reset(dataclasses.replace(engine.config, ladder=()))
    sampling = SamplingParams(max_tokens=4, ignore_eos=True)
    # 10 requests of 16 prompt tokens (two 8-token pages each) arrive at t = 100..109.
    for i in range(10):
        engine.add_request(list(range(3, 19)), sampling, arrival_time=100.0 + i)
    scheduler = engine.scheduler
    assert scheduler.load_signals(112.5) == {
        Signal.WAITING_REQUESTS: 10.0,
        Signal.KV_USAGE: 0.0,
        Signal.OLDEST_WAIT_S: 12.5,
    }
    engine.step()  # a 32-token budget: two prompts start, 4 pages of the 63 usable
    signals = scheduler.load_signals(112.5)
    assert signals[Signal.WAITING_REQUESTS] == 8.0
    assert signals[Signal.KV_USAGE] == pytest.approx(4 / engine.block_manager.num_usable_pages)
    assert signals[Signal.OLDEST_WAIT_S] == 10.5  # the two oldest left the queue
