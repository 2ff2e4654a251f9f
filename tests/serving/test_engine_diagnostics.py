"""The engine loop's named diagnostics: only known names with fitting arguments run, reads
show the engine's state, and a perturbation of the weights changes greedy tokens until it is
restored."""

import pytest
from engine_helpers import shared_tiny_engine

from claimbench.engine.sampling_params import SamplingParams
from claimbench.serving.engine_loop import diagnostics
from claimbench.serving.engine_loop.protocol import DiagnosticRequest

GREEDY = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)


def serve(engine, prompt, tenant="t") -> list[int]:
    request_id = engine.add_request(prompt, GREEDY, tenant=tenant)
    while engine.has_unfinished:
        engine.step()
    return list(engine.requests[request_id].output_token_ids)


@pytest.mark.parametrize(
    ("name", "args", "problem"),
    [
        ("eval", (), "unknown diagnostic"),
        (print, (), "unknown diagnostic"),
        ("num_requests", (1,), "takes 0 argument"),
        ("newest_request", (3,), "is not a str"),
        ("stall", ("1",), "is not a float"),
        ("stall", (True,), "is not a float"),
        ("stall", (31.0,), "seconds must be"),
        ("stall", (-1,), "seconds must be"),
        ("perturb_weights", (0.5,), "takes 2 argument"),
        ("perturb_weights", (float("nan"), 0), "scale must be"),
    ],
)
def test_unknown_names_and_misfit_arguments_are_refused_before_running(name, args, problem):
    with pytest.raises(ValueError, match=problem):
        diagnostics.run(None, name, args)  # refused before the engine is touched


def test_the_protocol_carries_a_name_not_a_callable():
    fields = DiagnosticRequest.__dataclass_fields__
    assert set(fields) == {"seq", "name", "args"}


def test_reads_show_the_engines_requests_and_tenants():
    engine = shared_tiny_engine()
    assert diagnostics.run(engine, "newest_request", ()) is None
    serve(engine, [5, 6, 7], tenant="alice")
    serve(engine, [8, 9], tenant="bob")
    assert diagnostics.run(engine, "num_requests", ()) == 2
    assert diagnostics.run(engine, "requests_per_tenant", ()) == {"alice": 1, "bob": 1}
    newest = diagnostics.run(engine, "newest_request", ())
    assert newest.tenant == "bob" and newest.prompt_token_ids == [8, 9]
    assert newest.num_output_tokens == 4 and newest.finish_reason == "length"
    assert diagnostics.run(engine, "newest_request", ("alice",)).prompt_token_ids == [5, 6, 7]
    assert diagnostics.run(engine, "newest_request", ("carol",)) is None
    assert not diagnostics.run(engine, "has_unfinished", ())
    steps = diagnostics.run(engine, "step_numbers", ())
    assert steps == sorted(steps) and len(steps) == diagnostics.run(engine, "num_step_rows", ())


def test_perturbed_weights_change_greedy_tokens_until_restored():
    engine = shared_tiny_engine()
    prompt = [5, 6, 7, 8]
    clean = serve(engine, prompt)
    diagnostics.run(engine, "perturb_weights", (2.0, 0))
    try:
        with pytest.raises(ValueError, match="already perturbed"):
            diagnostics.run(engine, "perturb_weights", (2.0, 0))
        assert serve(engine, prompt) != clean
    finally:
        diagnostics.run(engine, "restore_weights", ())
    assert serve(engine, prompt) == clean
    with pytest.raises(ValueError, match="not perturbed"):
        diagnostics.run(engine, "restore_weights", ())
