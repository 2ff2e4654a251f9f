"""The experiment contract (harness/experiment.py), checked as registry.load_experiment loads a
module: one clear error naming the file and what is wrong, defaults for what is optional."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write_claims

from claimbench.harness import registry
from claimbench.harness.claims import load_claims

REPO = Path(__file__).resolve().parents[2]
CLAIM = """\
- id: kv-int8
  part: 5
  title: An int8 KV cache
  statement: An int8 KV cache holds more.
  confidence: 0.8
  scope: any
  prediction:
    - {metric: capacity_ratio, op: ">=", value: 1.9}
  refuted_if: It does not.
"""


def load(tmp_path: Path, source: str):
    write_claims(tmp_path, CLAIM)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "kv_int8.py").write_text(source)
    (claim,) = load_claims(tmp_path)
    return registry.load_experiment(tmp_path, claim)


def test_a_module_with_only_run_gets_every_optional_default(tmp_path):
    experiment = load(tmp_path, "def run(ctx):\n    pass\n")
    assert callable(experiment.run)
    assert experiment.DEFAULT_PARAMS == {}
    assert experiment.engines is None and experiment.figures is None


def test_a_module_keeps_what_it_defines(tmp_path):
    experiment = load(
        tmp_path,
        "DEFAULT_PARAMS = {'n': 2}\n"
        "def run(ctx):\n    pass\n"
        "def engines(params, model, dtype):\n    return None\n"
        "def figures(run_dirs):\n    return []\n",
    )
    assert experiment.DEFAULT_PARAMS == {"n": 2}
    assert experiment.figures([]) == []
    assert experiment.engines({}, None, "float32") is None


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("VALUE = 1\n", "kv_int8.py defines no run\\(ctx\\) function"),
        ("run = 3\n", "kv_int8.py defines no run\\(ctx\\) function"),
        (
            "DEFAULT_PARAMS = [1]\ndef run(ctx):\n    pass\n",
            "kv_int8.py DEFAULT_PARAMS must be a dict, got list",
        ),
        ("figures = 'x'\ndef run(ctx):\n    pass\n", "kv_int8.py figures must be a function"),
        ("engines = {}\ndef run(ctx):\n    pass\n", "kv_int8.py engines must be a function"),
    ],
)
def test_a_module_breaking_the_contract_is_one_error_naming_it(tmp_path, source, message):
    with pytest.raises(registry.ExperimentError, match=message) as caught:
        load(tmp_path, source)
    assert str(caught.value).startswith("claim 'kv-int8': ")
    assert len(str(caught.value).splitlines()) == 1


def test_every_shipped_experiment_keeps_the_contract():
    for claim in load_claims(REPO):
        if registry.has_experiment(REPO, claim):
            experiment = registry.load_experiment(REPO, claim)
            assert isinstance(experiment.DEFAULT_PARAMS, dict), claim.id
