"""Error rates and trial counts of `run --until-decided`'s stopping rule, against peeking.

Simulated trial streams with a known mean, below, at and above a threshold, each run many times
with two rules that look after every block of trials and stop once the interval clears the
threshold: the confidence sequence `run --until-decided` uses (harness/confseq.py) and the
fixed-n Student-t interval peeked at every look. An error is a stream decided on the wrong side
of the threshold, or, for a mean exactly at it, decided at all. Prints both rules' error rates
side by side and the mean number of trials each took.

    .venv/bin/python benchmarks/sequential_error_rates.py [--streams 1000] [--max-trials 20]
"""

from __future__ import annotations

import argparse

import numpy as np

from claimbench.harness import confseq, intervals

THRESHOLD = 0.0
MIN_LOOK = 3  # the fewest trials scoring looks at (evidence_rules.MIN_TRIALS)
SD = 1.0


def simulate(
    rule: str, mean: float, *, streams: int, block: int, max_trials: int, seed: int
) -> tuple[float, float]:
    """(error rate, mean trials run) of ``rule`` ("cs" or "t-peek") over ``streams`` normal
    streams f64[streams, max_trials] with the given ``mean`` and SD, against THRESHOLD."""
    values = np.random.default_rng(seed).normal(mean, SD, (streams, max_trials))
    decided = np.zeros(streams, dtype=bool)
    wrong = np.zeros(streams, dtype=bool)
    trials = np.full(streams, max_trials)
    for n in range(block, max_trials + 1, block):
        if n < MIN_LOOK:
            continue
        bounds = confseq.t_cs_bounds if rule == "cs" else intervals.t_bounds
        _, lo, hi = bounds(values[:, :n])
        above, below = lo > THRESHOLD, hi < THRESHOLD
        now = (above | below) & ~decided
        if mean > THRESHOLD:
            wrong |= now & below
        elif mean < THRESHOLD:
            wrong |= now & above
        else:
            wrong |= now
        trials[now] = n
        decided |= now
    return float(wrong.mean()), float(trials.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--block", type=int, default=1)
    parser.add_argument("--max-trials", type=int, default=20)
    args = parser.parse_args()
    alpha = 1 - confseq.CONFIDENCE_LEVEL
    print(
        f"{args.streams} streams each, sd {SD}, look every {args.block} trial(s), at most "
        f"{args.max_trials}; stated error rate {alpha:.3f}"
    )
    print(
        f"{'mean - threshold':>17} | {'CS error':>8} {'CS trials':>9} | "
        f"{'t-peek error':>12} {'t-peek trials':>13}"
    )
    for k, mean in enumerate((-1.0, -0.5, 0.0, 0.5, 1.0)):
        cs = simulate(
            "cs", mean, streams=args.streams, block=args.block, max_trials=args.max_trials, seed=k
        )
        tp = simulate(
            "t-peek",
            mean,
            streams=args.streams,
            block=args.block,
            max_trials=args.max_trials,
            seed=k,
        )
        print(f"{mean:>17.2f} | {cs[0]:>8.3f} {cs[1]:>9.1f} | {tp[0]:>12.3f} {tp[1]:>13.1f}")


if __name__ == "__main__":
    main()
