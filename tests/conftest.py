"""Shared fixtures: a tiny claims project in a temp dir, with fake experiments (no engine)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from claimbench.harness.results import StoredRun
from claimbench.ops.audit_key import KEY_FILE_ENV_VAR

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _share_compiled_programs() -> None:
    """One persistent XLA compilation cache for the whole run, in a temporary directory: many
    modules build the same tiny engines, and each module's end frees its compiled programs
    (below), so without it every module compiled them again. Set before JAX starts, so the
    subprocesses tests launch (CLI runs, workers) inherit it; experiments' own cache
    (``compile_cache``) lands there too, not in the user's. The cold-start probe strips it
    from its processes. A run under pytest-xdist creates it in the controller, whose
    environment the workers inherit, and the creator removes it at exit."""
    if not os.environ.get("CLAIMBENCH_COMPILE_CACHE"):
        path = tempfile.mkdtemp(prefix="claimbench-tests-xla-")
        os.environ["CLAIMBENCH_COMPILE_CACHE"] = path
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.environ["CLAIMBENCH_COMPILE_CACHE"])
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")


_share_compiled_programs()

# XLA:CPU compiles for the tests at LLVM's lowest optimisation level and with its classic
# elemental emitters instead of the MLIR fusion emitters: the same computation, compiled
# about 3x faster (the tiny engine's precompile: 6 s of backend compile against 2 s). Compile
# is over half of the suite's time, and its tiny shapes run in microseconds either way.
# A TPU compile gives the same report with them (tpu-check: every field but compile_s);
# benchmarks and runs keep XLA's defaults. Set before JAX starts, so workers and test
# subprocesses inherit them; a caller's own XLA_FLAGS come after and win.
_FAST_CPU_COMPILE = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
if _FAST_CPU_COMPILE not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{_FAST_CPU_COMPILE} {os.environ.get('XLA_FLAGS', '')}".strip()


@pytest.fixture(autouse=True)
def _audit_key_file(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Every test's MCP audit key lives in a temp directory of its own (never the user's
    config), outside any audit log's directory."""
    path = tmp_path_factory.mktemp("audit-key") / "audit.key"
    monkeypatch.setenv(KEY_FILE_ENV_VAR, str(path))
    return path


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Free each module's compiled XLA programs when it ends. Every CPU executable keeps its
    own memory mappings, and a whole suite's worth in one process passes the kernel's
    vm.max_map_count (65,530), after which the next compile crashes the process."""
    yield
    import gc

    import jax

    gc.collect()
    jax.clear_caches()
    gc.collect()


FAKE_CLAIMS = """\
- id: fake-pass
  part: 1
  title: Fake claim that holds
  statement: The fake score is at least 1.
  confidence: 0.8
  scope: any
  prediction:
    - {metric: score, op: ">=", value: 1.0}
  refuted_if: The fake score is confidently below 1.
  experiment: fake
  params: {quick: {base: 2.0}, full: {base: 2.0, trials: 4}}
- id: fake-fail
  part: 1
  title: Fake claim that fails
  statement: The fake score is at least 1.
  confidence: 0.6
  scope: any
  prediction:
    - {metric: score, op: ">=", value: 1.0}
  refuted_if: The fake score is confidently below 1.
  experiment: fake
  params: {quick: {base: 0.5}, full: {base: 0.5}}
- id: fake-tpu
  part: 2
  title: Fake claim about TPUs
  statement: The fake score is at least 1 on a TPU.
  confidence: 0.7
  scope: tpu
  prediction:
    - {metric: score, op: ">=", value: 1.0}
  refuted_if: The fake score is confidently below 1 on a TPU.
  experiment: fake
  params: {quick: {base: 2.0}}
- id: fake-broken
  part: 2
  title: Fake claim whose experiment raises
  statement: Never measured.
  confidence: 0.5
  scope: any
  prediction:
    - {metric: score, op: ">=", value: 1.0}
  refuted_if: Never.
  experiment: broken
- id: fake-unwritten
  part: 3
  title: Fake claim without an experiment
  statement: Nobody has written its experiment.
  confidence: 0.9
  scope: any
  prediction:
    - {metric: score, op: ">=", value: 1.0}
  refuted_if: Never.
"""

FAKE_EXPERIMENT = '''\
"""A fake experiment: score = params["base"] + 0.01 * trial."""

import pandas as pd


def run(ctx):
    base = ctx.params["base"]
    for trial in range(ctx.trials):
        ctx.record("score", base + 0.01 * trial, trial=trial, unit="x")
        ctx.record("bytes_moved", 1000.0, trial=trial, evidence="analytic", kind="model")
    requests = pd.DataFrame({"request_id": ["r0", "r1"], "ttft_s": [0.1, 0.2]})
    steps = pd.DataFrame({"step": [0, 1], "num_tokens": [16, 1]})
    ctx.save_frames(requests=requests, steps=steps, mode="fcfs")
    ctx.save_frames(requests=requests, mode="vtc")


def figures(run_dirs):
    return [
        (
            "Fake figure",
            f'<svg xmlns="http://www.w3.org/2000/svg" width="60" height="20">'
            f"<text x='0' y='15'>runs={len(run_dirs)}</text></svg>",
        )
    ]
'''

BROKEN_EXPERIMENT = """\
def run(ctx):
    ctx.record("score", 1.0, trial=0)
    raise RuntimeError("the fake engine fell over\\nsecond line")
"""

INTERRUPTED_EXPERIMENT = """\
def run(ctx):
    ctx.record("score", 1.0, trial=0)
    raise KeyboardInterrupt
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A claims project: five claims, fake experiments, no results yet."""
    root = tmp_path / "project"
    (root / "experiments").mkdir(parents=True)
    (root / "claims.yaml").write_text(FAKE_CLAIMS)
    (root / "experiments" / "fake.py").write_text(FAKE_EXPERIMENT)
    (root / "experiments" / "broken.py").write_text(BROKEN_EXPERIMENT)
    # The commit its runs record (an exported tree's marker): a run without one is not scored.
    (root / "SOURCE_COMMIT").write_text("c0ffee" + "0" * 34 + "\n")
    return root


@pytest.fixture
def interrupting_project(project: Path) -> Path:
    """The project, with fake-broken's experiment replaced by one that is Ctrl-C'd mid-run."""
    (project / "experiments" / "broken.py").write_text(INTERRUPTED_EXPERIMENT)
    return project


def write_claims(root: Path, text: str) -> Path:
    """Write ``text`` (dedented) as root/claims.yaml."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "claims.yaml"
    path.write_text(textwrap.dedent(text))
    return path


Row = tuple[str, int, float, str]  # (metric, trial, value, evidence)


@pytest.fixture
def make_run() -> Callable[..., StoredRun]:
    """Build an in-memory StoredRun from (metric, trial, value, evidence) rows."""

    def make(run_id: str, claim_id: str, rows: list[Row], profile: str = "quick") -> StoredRun:
        frame = pd.DataFrame(
            [
                {
                    "run_id": run_id,
                    "claim_id": claim_id,
                    "trial": trial,
                    "metric": metric,
                    "value": value,
                    "unit": "",
                    "evidence": evidence,
                    "labels": "{}",
                }
                for metric, trial, value, evidence in rows
            ],
            columns=[
                "run_id",
                "claim_id",
                "trial",
                "metric",
                "value",
                "unit",
                "evidence",
                "labels",
            ],
        )
        meta = {
            "run_id": run_id,
            "claim": claim_id,
            "profile": profile,
            "end": f"2026-11-29T{run_id[9:11]}:00:00+00:00",
        }
        return StoredRun(path=Path("/nonexistent") / run_id, meta=meta, measurements=frame)

    return make
