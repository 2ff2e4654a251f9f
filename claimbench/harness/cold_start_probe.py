"""One cold start, run as a fresh process: build an engine, serve a first request, report.

``python -m claimbench.harness.cold_start_probe '<json>'`` builds an LLMEngine from the JSON's
``config`` (EngineConfig fields), compiles every bucket first if ``precompile``, serves one
request (``first_prompt`` token ids, ``max_tokens``), then the ``workload`` prompts at once,
and prints one JSON line: the wall-clock time (time.time()) of the first token, so the parent,
which noted the time it launched this process, gets process start to first token; the
compilations while serving (the runner's count, from engine.stats(), after precompiling);
precompile's programs and seconds; and, from the step records, each bucket's first step
time beside its later steps' median (the difference is its compile time, when it compiled
while serving).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np
import pandas as pd


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
    from claimbench.engine.sampler import SamplingParams

    engine = build_engine(EngineConfig(**spec["config"]))
    precompile_s = engine.precompile()[1] if spec["precompile"] else 0.0
    # Step programs compiled ahead (async scheduling's small token-merge programs, which
    # precompile also compiles, are in precompile_s but not counted as programs).
    compiled = engine.stats().num_compilations
    sampling = SamplingParams(max_tokens=spec["max_tokens"], ignore_eos=True)
    # perf_counter is the engine's clock; time.time() is the one the parent shares.
    wall_minus_perf = time.time() - time.perf_counter()
    engine.generate([spec["first_prompt"]], sampling)
    first = engine.requests_frame().iloc[0]
    first_token_wall = wall_minus_perf + engine.start_time + float(first["first_token_s"])
    engine.generate(spec["workload"], sampling)
    stats = engine.stats()
    return {
        "first_token_wall": first_token_wall,
        "first_ttft_s": float(first["ttft_s"]),
        "num_precompiled": int(compiled),
        "precompile_s": float(precompile_s),
        "compiles_during_serving": int(stats.num_compilations - compiled),
        "compile_time_s": float(stats.compile_time_s),
        "num_compilations": int(stats.num_compilations),
        "buckets": bucket_first_steps(engine.steps_frame()),
    }


def main(argv: list[str]) -> None:
    """Read the spec from argv[1] and print the result as the last line of stdout."""
    if len(argv) != 2:
        raise SystemExit("usage: python -m claimbench.harness.cold_start_probe '<json spec>'")
    result = probe(json.loads(argv[1]))
    print(json.dumps(result, default=lambda x: float(x) if isinstance(x, np.floating) else str(x)))


if __name__ == "__main__":
    main(sys.argv)
