"""One cold start, run as a fresh process: build an engine, serve a first request, report.

``python -m claimbench.lab.probes.cold_start_probe '<json>'`` builds an LLMEngine from the JSON's
``config`` (EngineConfig fields), compiles every bucket first if ``precompile``, serves one
request (``first_prompt`` token ids, ``max_tokens``), then the ``workload`` prompts along
every path a request can take (``serving_batches``), and prints one JSON line: the wall-clock
time (time.time()) of the first token, so the parent, which noted the time it launched this
process, gets process start to first token; the XLA programs built while serving, counted
from JAX's compile events (lab/probes/compile_events.py) from the first request to the last,
beside the runner's own count of step programs; precompile's programs and seconds; and, from
the step records, each bucket's first step time beside its later steps' median (the
difference is its compile time, when it compiled while serving).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np
import pandas as pd

from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.probes.compile_events import CompileCounter

# The sampling settings a served request can carry (serving/api/completions.py), each a
# different path through the sampler and the step's outputs: greedy, filtered sampling with
# a seed, log-probs of the sampled tokens, and stop tokens. Prompt log-probs are left out:
# the API has no way to ask for them, so a server never takes that path.
SAMPLING_PATHS: dict[str, dict[str, Any]] = {
    "greedy": {},
    "sampled": {"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 7},
    "logprobs": {"logprobs": True},
    "stop": {"stop_token_ids": (3,)},
}


def serving_batches(
    first_prompt: list[int], workload: list[list[int]], max_tokens: int
) -> list[tuple[list[list[int]], list[SamplingParams]]]:
    """The batches served after the first request, together every path a request can take:
    the workload under each sampling setting on its own (a batch of one kind), then under all
    of them mixed in one batch, then prefix hits (the first prompt, whose full blocks are
    cached by now, extended by each workload prompt), greedy and sampled."""
    settings = [
        SamplingParams(max_tokens=max_tokens, ignore_eos=True, **options)
        for options in SAMPLING_PATHS.values()
    ]
    batches = [(workload, [s] * len(workload)) for s in settings]
    mixed = [(prompt, s) for prompt in workload for s in settings]
    batches.append(([p for p, _ in mixed], [s for _, s in mixed]))
    extended = [first_prompt + prompt for prompt in workload]
    batches.append((extended, [settings[i % 2] for i in range(len(extended))]))
    return batches


def bucket_first_steps(steps: pd.DataFrame) -> list[dict[str, Any]]:
    """Per (token bucket, seq bucket): its first step's device seconds, the median of its later
    steps (None if it ran once) and how many steps ran at it."""
    out = []
    for (tokens, seqs), group in steps.groupby(["token_bucket", "seq_bucket"], sort=True):
        later = group["device_s"].iloc[1:]
        out.append(
            {
                "token_bucket": int(tokens),
                "seq_bucket": int(seqs),
                "first_s": float(group["device_s"].iloc[0]),
                "later_median_s": float(later.median()) if len(later) else None,
                "num_steps": len(group),
            }
        )
    return out


def probe(spec: dict[str, Any]) -> dict[str, Any]:
    """The cold start ``spec`` describes (see the module), measured in this process."""
    from claimbench.engine.build import build_engine
    from claimbench.engine.config import EngineConfig

    engine = build_engine(EngineConfig.from_flat(**spec["config"]))
    # What the server precompiles (serving/engine_loop/engine_core.py).
    precompile_s = engine.precompile()[1] if spec["precompile"] else 0.0
    # Step programs compiled ahead (async scheduling's small token-merge programs, which
    # precompile also compiles, are in precompile_s but not counted as programs).
    compiled = engine.stats().num_compilations
    sampling = SamplingParams(max_tokens=spec["max_tokens"], ignore_eos=True)
    # perf_counter is the engine's clock; time.time() is the one the parent shares.
    wall_minus_perf = time.time() - time.perf_counter()
    with CompileCounter() as serving:
        engine.generate([spec["first_prompt"]], sampling)
        first = engine.requests_frame().iloc[0]
        for prompts, settings in serving_batches(
            spec["first_prompt"], spec["workload"], spec["max_tokens"]
        ):
            engine.generate(prompts, settings)
    first_token_wall = wall_minus_perf + engine.start_time + float(first["first_token_s"])
    stats = engine.stats()
    return {
        "first_token_wall": first_token_wall,
        "first_ttft_s": float(first["ttft_s"]),
        "num_precompiled": int(compiled),
        "precompile_s": float(precompile_s),
        "compiles_during_serving": serving.num_programs,
        "xla_compiled_during_serving": serving.num_compiled,
        "cache_loads_during_serving": serving.num_cache_hits,
        "programs_built_while_serving": serving.names,
        "runner_compiles_during_serving": int(stats.num_compilations - compiled),
        "prefix_hit_tokens": int(engine.requests_frame()["prefix_hit_tokens"].sum()),
        "compile_time_s": float(stats.compile_time_s),
        "num_compilations": int(stats.num_compilations),
        "buckets": bucket_first_steps(engine.steps_frame()),
    }


def main(argv: list[str]) -> None:
    """Read the spec from argv[1] and print the result as the last line of stdout."""
    if len(argv) != 2:
        raise SystemExit("usage: python -m claimbench.lab.probes.cold_start_probe '<json spec>'")
    result = probe(json.loads(argv[1]))
    print(json.dumps(result, default=lambda x: float(x) if isinstance(x, np.floating) else str(x)))


if __name__ == "__main__":
    main(sys.argv)
