"""The saturation meter's reproducibility on this host: how far apart readings land.

    python benchmarks/service_rate_meter.py [--trials 12] [--saturation-requests 32] [--json]

The shipped model on fairness-vtc's quick engine (float32, max_num_seqs 8, 128-token steps)
and its mix (prompts 16-64, outputs 16-48), as lab/load/service_rate.py measures it: each
"trial" is a pace, then one second of idle (where an experiment serves its arms), then a
measure, trial after trial on one engine. Printed side by side from the same bursts:

* each single burst's reading, and the spread of the readings (coefficient of variation);
* the old design's pace error: a trial paced by the one burst before it and judged by the
  one after it (the ratio judge / pace; a realised load is the target times its inverse);
* the meter's: paced by the median of the earlier trials' last four readings, judged by the
  mean of the two bursts bracketing the trial.

A ratio outside 0.8-1.25 is a trial a 25% load tolerance would drop for the meter alone. The
figures, their host and commit are in docs/performance/service_rate.md.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from claimbench.engine.build import build_engine
from claimbench.engine.config import EngineConfig
from claimbench.lab.load import service_rate
from claimbench.lab.load import tenant_runs as tr
from claimbench.models.checkpoint import default_model_path
from claimbench.workload.spec import WorkloadSpec


def mix(seed: int, num_requests: int) -> WorkloadSpec:
    tenants = (
        tr.poisson_tenant("heavy", 0.65, [16, 64], [16, 48]),
        tr.poisson_tenant("light", 0.35, [16, 64], [16, 48]),
    )
    return WorkloadSpec(tenants, seed=seed, max_requests=num_requests)


def ratios(pace: list[float], judge: list[float]) -> list[float]:
    return [round(float(j / p), 3) for p, j in zip(pace, judge, strict=True)]


def outside(values: list[float], low: float = 0.8, high: float = 1.25) -> int:
    return sum(not low <= v <= high for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--saturation-requests", type=int, default=32)
    parser.add_argument("--idle-s", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    config = EngineConfig.from_flat(
        model_path=str(default_model_path()),
        dtype="float32",
        max_num_seqs=8,
        max_num_batched_tokens=128,
        max_model_len=256,
    )
    engine = build_engine(config)
    engine.precompile()
    meter = service_rate.SaturationMeter(engine, args.saturation_requests)
    paces, services = [], []
    for trial in range(args.trials):
        spec = mix(trial, args.saturation_requests)
        paces.append(meter.pace(spec).output_tokens_per_s)
        time.sleep(args.idle_s)
        services.append(meter.measure(spec).output_tokens_per_s)
    readings = [r.output_tokens_per_s for r in meter.readings]
    before, after = readings[0::2], readings[1::2]
    # The old design: trial k paced by the reading after trial k-1, judged by its own after.
    old = ratios(after[:-1], after[1:])
    new = ratios(paces, services)
    report = {
        "readings_tok_s": [round(x, 1) for x in readings],
        "warm_up_tok_s": [round(r.output_tokens_per_s, 1) for r in meter.warm_up],
        "single_reading_cv": float(np.std(readings) / np.mean(readings)),
        "pair_mean_cv": float(np.std(services) / np.mean(services)),
        "within_trial_before_over_after": [
            round(b / a, 3) for b, a in zip(before, after, strict=True)
        ],
        "old_judge_over_pace": old,
        "meter_judge_over_pace": new,
        "old_outside_tolerance": outside(old),
        "meter_outside_tolerance": outside(new),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"warm-up readings (tok/s): {report['warm_up_tok_s']}")
    print(f"trial readings (tok/s, before/after pairs): {report['readings_tok_s']}")
    print(
        f"spread: one burst CV {report['single_reading_cv']:.3f}, "
        f"mean of a trial's two CV {report['pair_mean_cv']:.3f}"
    )
    print(f"old (one burst before, one after): judge/pace {report['old_judge_over_pace']}")
    print(f"meter (median of 4 earlier, mean of 2 own): {report['meter_judge_over_pace']}")
    print(
        f"outside 0.8-1.25 (a 25% tolerance): old {report['old_outside_tolerance']} of "
        f"{len(old)}, meter {report['meter_outside_tolerance']} of {len(new)}"
    )


if __name__ == "__main__":
    main()
