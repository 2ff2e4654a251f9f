"""A claim's runs over five nights, for the history tests (library, CLI and site).

    11-29  cpu  gain ~2.0 (holds)            design d1, commit aaa
    11-30  cpu  gain ~2.0 (drift within noise) design d1, commit bbb
    12-01  cpu  gain ~1.2 (fails: a flip, and a shift beyond noise) design d1, commit ccc
    12-02  cpu  gain ~1.2 (the design changed: not compared) design d2, commit ddd
    12-03  tpu  gain ~2.0 (a new hardware class) design d2, commit eee

Today's design is d2 (TODAY), so the d1 runs are listed, not scored, and still compared with
each other: they measured the same design.
"""

from __future__ import annotations

from pathlib import Path

from scoring_helpers import claim, rows, store_run

from claimbench.harness.claims import Claim
from claimbench.harness.results import StoredRun

D1, D2 = "d1" * 8, "d2" * 8  # design hashes
TODAY = {"c": D2}
NIGHTS = (
    ("2026-11-29", "cpu", [2.0, 2.1, 1.9, 2.0, 2.05], D1, "a"),
    ("2026-11-30", "cpu", [2.05, 1.95, 2.1, 2.0, 1.98], D1, "b"),
    ("2026-12-01", "cpu", [1.2, 1.25, 1.15, 1.22, 1.18], D1, "c"),
    ("2026-12-02", "cpu", [1.21, 1.24, 1.16, 1.2, 1.19], D2, "d"),
    ("2026-12-03", "tpu", [2.0, 2.02, 1.98, 2.01, 1.99], D2, "e"),
)


def history_claim() -> Claim:
    return claim(conditions=[{"metric": "gain", "op": ">=", "value": 1.5}])


def store_nights(results_dir: Path, for_claim: Claim | None = None) -> list[StoredRun]:
    """The five nights' runs under ``results_dir`` (oldest first)."""
    for_claim = for_claim or history_claim()
    stored = []
    for day, evidence, values, design, commit in NIGHTS:
        stored.append(
            store_run(
                results_dir,
                for_claim,
                rows("gain", values, evidence),
                day=day,
                extra_meta={"design_hash": design, "git": {"sha": commit * 40, "dirty": False}},
            )
        )
    return stored


CLAIMS_YAML = """\
- id: c
  part: 1
  title: t
  statement: s
  confidence: 0.8
  scope: any
  scope_reason: Because the mechanism is an algorithm.
  prediction:
    - {metric: gain, op: ">=", value: 1.5}
  refuted_if: r
"""


def history_project(root: Path) -> Path:
    """A claims project holding the one claim and its five nights (no experiment file, so no
    run is of today's design: each is listed, and compared with its neighbours)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "claims.yaml").write_text(CLAIMS_YAML)
    store_nights(root / "results")
    return root


V6E = {"platform": "tpu", "chip": "v6e", "num_chips": 1}
CPU = {"platform": "cpu", "cpu_model": "Xeon", "host_cpu_count": 2}


def peer_record(day: str, ours: list[float], theirs: list[float], hardware=V6E, sha="a" * 40):
    """A measured peer record with per-round tok/s on both sides."""
    side = {
        "mean_tok_s": sum(ours) / len(ours),
        "tok_s": ours,
        "ttft_ms": {"p50": 10.0, "p99": 30.0},
        "tpot_ms": {"p50": 2.0, "p99": 5.0},
    }
    peer = {"mean_tok_s": sum(theirs) / len(theirs), "tok_s": theirs}
    return {
        "peer": "vllm",
        "status": "measured",
        "time": f"{day}T03:00:00+00:00",
        "hardware": hardware,
        "git": {"sha": sha},
        "result": {"ours": side, "vllm": peer, "ratio": side["mean_tok_s"] / peer["mean_tok_s"]},
    }
