"""The server's per-step metric: one observation per engine step, of the tokens it ran."""

from __future__ import annotations

import pytest
from engine_helpers import shared_tiny_engine
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from claimbench.engine.sampling_params import SamplingParams
from claimbench.serving.monitoring.metrics import ServerMetrics


def iteration_tokens(metrics: ServerMetrics) -> tuple[float, float]:
    """(count, sum) of vllm:iteration_tokens_total, read back from the exposition."""
    text = generate_latest(metrics.registry).decode()
    for family in text_string_to_metric_families(text):
        if family.name == "vllm:iteration_tokens_total":
            values = {s.name: s.value for s in family.samples}
            return values["vllm:iteration_tokens_total_count"], values[
                "vllm:iteration_tokens_total_sum"
            ]
    raise AssertionError("vllm:iteration_tokens_total is not exposed")


@pytest.mark.slow
def test_iteration_tokens_counts_every_step_once_across_trimmed_records():
    engine = shared_tiny_engine()
    metrics = ServerMetrics()
    sampling = SamplingParams(max_tokens=8, ignore_eos=True)
    # Prompts over the 32-token budget: chunked prefill, then decodes of a shrinking batch.
    for n, prompt_len in enumerate((40, 9, 17, 3)):
        engine.add_request([5 + n] * prompt_len, sampling)
    tokens, steps, calls = 0, 0, 0
    while engine.has_unfinished:
        events = engine.step()
        calls += 1
        if calls % 3 == 0:
            metrics.observe(engine, events)  # not after every step: a call may see several
        if calls % 4 == 0:
            # The server trims what it keeps; a trim between observations loses nothing
            # observed, and the records after it keep their step numbers.
            steps += len(engine.step_records)
            tokens += sum(r.num_scheduled_tokens for r in engine.step_records)
            metrics.observe(engine, [])
            engine.trim_step_records(0)
    steps += len(engine.step_records)
    tokens += sum(r.num_scheduled_tokens for r in engine.step_records)
    metrics.observe(engine, [])
    count, total = iteration_tokens(metrics)
    assert steps > 8 and tokens == 40 + 9 + 17 + 3 + 4 * 7
    assert (count, total) == (steps, tokens)
    metrics.observe(engine, [])  # nothing new: nothing counted twice
    assert iteration_tokens(metrics) == (steps, tokens)
