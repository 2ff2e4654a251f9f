"""lab.engines.single_completion, called directly: the step budget and one request run to its
end."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import shared_tiny_engine, tiny_engine

from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.engines.single_completion import (
    MAX_CHUNK_TOKENS,
    complete,
    completion_config,
    step_budget,
    timing_line,
)


@pytest.mark.parametrize(
    ("prompt_tokens", "budget"), [(1, 16), (16, 16), (17, 32), (33, 64), (64, 64), (500, 64)]
)
def test_step_budget_is_the_smallest_power_of_two_that_holds_the_prompt(prompt_tokens, budget):
    assert step_budget(prompt_tokens) == budget <= MAX_CHUNK_TOKENS


def test_config_serves_one_sequence_and_names_a_bad_field() -> None:
    config = completion_config(Path("m"), "float32", 20, 256, speculative="none", tp=1)
    sched = config.scheduler
    assert (sched.max_num_seqs, sched.max_num_batched_tokens, sched.max_model_len) == (
        1,
        32,
        256,
    )
    with pytest.raises(ValueError, match="num_spec_tokens"):
        completion_config(Path("m"), "float32", 20, 256, speculative="ngram", num_spec_tokens=0)


class Brackets:
    """A decoder that shows each token as <id> and holds back a tail for flush()."""

    def push(self, token_id: int) -> str:
        return f"<{token_id}>"

    def flush(self) -> str:
        return "|end"


@pytest.mark.slow
def test_complete_streams_every_token_then_the_tail_and_times_the_request() -> None:
    engine = tiny_engine()
    pieces: list[str] = []
    sampling = SamplingParams(max_tokens=5, ignore_eos=True)
    done = complete(engine, [3, 4, 5, 6], sampling, Brackets(), pieces.append)
    assert done.finish_reason == "length" and len(done.token_ids) == 5
    assert "".join(pieces) == "".join(f"<{t}>" for t in done.token_ids) + "|end"
    timing = done.timing
    assert (timing["prompt_tokens"], timing["output_tokens"]) == (4, 5)
    assert timing["num_compiled"] >= 1 and timing["tpot_s"] is not None
    assert timing["ttft_s"] <= timing["e2el_s"]
    assert "4 prompt + 5 output tokens (length)" in timing_line(timing, done.finish_reason)
    # Without a callback nothing is streamed and the result is the same request's.
    again = complete(shared_tiny_engine(), [3, 4, 5, 6], sampling, Brackets())
    assert again.token_ids == done.token_ids  # greedy: the same tokens
