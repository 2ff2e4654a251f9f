"""Edits that change what a shipped experiment measures move its design hash; edits that only
describe the code move none. Each edit is made to a copy of the project's sources."""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from claimbench.harness.design import design_of

REPO = Path(__file__).resolve().parents[2]
_MTIMES = itertools.count(1_000_000_000_000_000_000, 1_000_000_000)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of claimbench/ and experiments/ to edit."""
    root = tmp_path_factory.mktemp("project")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
    for name in ("claimbench", "experiments"):
        shutil.copytree(REPO / name, root / name, ignore=ignore)
    return root


def designs(root: Path) -> dict[str, str]:
    """experiment stem -> design hash, every shipped experiment, sources read under ``root``."""
    return {
        exp.stem: design_of(exp, root).hash for exp in sorted((root / "experiments").glob("*.py"))
    }


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    # A fresh mtime per write: an edit and its undo must never share a cached stat.
    stamp = next(_MTIMES)
    os.utime(path, ns=(stamp, stamp))


def edited(root: Path, relative: str, edit: Callable[[bytes], bytes]) -> dict[str, str]:
    """The designs with ``edit`` applied to ``root/relative``; the file is restored after."""
    path = root / relative
    original = path.read_bytes()
    changed = edit(original)
    assert changed != original, f"the edit of {relative} changed nothing"
    _write(path, changed)
    try:
        return designs(root)
    finally:
        _write(path, original)


def replace(old: str, new: str) -> Callable[[bytes], bytes]:
    def edit(data: bytes) -> bytes:
        text = data.decode()
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
        return text.replace(old, new).encode()

    return edit


def flip_byte(offset: int) -> Callable[[bytes], bytes]:
    def edit(data: bytes) -> bytes:
        return data[:offset] + bytes([data[offset] ^ 1]) + data[offset + 1 :]

    return edit


MUTATIONS = {
    "alias swap": (
        "experiments/bucket_padding.py",
        replace(
            "import EmpiricalLength, LognormalLength",
            "import EmpiricalLength as LognormalLength, LognormalLength as EmpiricalLength",
        ),
        {"bucket_padding"},
    ),
    "prefix alias": (
        "experiments/fair_victim.py",
        replace("import INPUT_PREFIX", "import OUTPUT_PREFIX as INPUT_PREFIX"),
        {"fair_victim"},
    ),
    "victim choice": (
        "claimbench/engine/sched/policies.py",
        replace(
            "return min(own, key=lambda r: (r.num_computed_tokens, -r.arrival_time, -r.seq_no))",
            "return max(own, key=lambda r: (r.num_computed_tokens, -r.arrival_time, -r.seq_no))",
        ),
        {"fair_victim"},
    ),
    "bucket filter": (
        "claimbench/engine/worker/buckets.py",
        replace("for s in seq_buckets(cfg) if s <= t]", "for s in seq_buckets(cfg)]"),
        {"bucket_padding"},
    ),
    "page size": (
        "claimbench/engine/config.py",
        replace("DEFAULT_PAGE_SIZE = 16", "DEFAULT_PAGE_SIZE = 32"),
        {"paged_waste", "bucket_padding"},
    ),
    "package init": (
        "claimbench/lab/__init__.py",
        lambda data: (
            data + b"\nimport os\nos.environ['XLA_FLAGS'] = '--xla_cpu_use_thunk_runtime=false'\n"
        ),
        {"fair_victim", "bucket_padding", "kv_int8"},
    ),
    "weights": (
        "claimbench/models/assets/claimbench-tiny/model.safetensors",
        flip_byte(-100),
        {"kv_int8", "fp8_weights", "spec_decode_gain"},
    ),
    "tokenizer": (
        "claimbench/models/assets/claimbench-tiny/tokenizer.json",
        replace('"unk_token"', '"unk_tokem"'),
        {"prefix_leak", "kv_int8"},
    ),
    "corpus": (
        "claimbench/models/assets/heldout.txt.gz",
        flip_byte(-10),
        {"kv_int8", "fp8_weights"},
    ),
    "native kernel": (
        "claimbench/kernels/native/paged_decode.cc",
        lambda data: data + b"\nstatic int unused_probe_counter = 0;\n",
        {"bucket_padding", "paged_waste"},
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_an_edit_that_changes_a_measurement_moves_the_hash_of_its_claims(tree, name):
    relative, edit, affected = MUTATIONS[name]
    before = designs(tree)
    after = edited(tree, relative, edit)
    moved = {stem for stem in before if before[stem] != after[stem]}
    assert affected <= moved, f"{name}: {sorted(affected - moved)} did not move"
    assert designs(tree) == before  # restoring the file restores every hash


@pytest.mark.slow
def test_an_edit_to_an_experiment_moves_only_that_experiments_hash(tree):
    before = designs(tree)
    after = edited(tree, *MUTATIONS["alias swap"][:2])
    assert {stem for stem in before if before[stem] != after[stem]} == {"bucket_padding"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("relative", "old", "new"),
    [
        (
            "claimbench/engine/sched/policies.py",
            '"""From the tenant holding the most pages',
            '"""Of the tenant holding the most pages',
        ),
        (
            "claimbench/engine/config.py",
            "# paged: a request's pages",
            "# paged: each request's pages",
        ),
        ("experiments/bucket_padding.py", '"""', '"""Reworded. '),
    ],
)
def test_a_docstring_or_comment_edit_moves_no_hash(tree, relative, old, new):
    def edit(data: bytes) -> bytes:
        return data.decode().replace(old, new, 1).encode()

    assert edited(tree, relative, edit) == designs(tree)


@pytest.mark.slow
def test_a_package_that_shadows_a_module_is_what_is_hashed(tree):
    # Python imports buckets/__init__.py, not buckets.py, once both exist: the design follows.
    module = tree / "claimbench/engine/worker/buckets.py"
    package = tree / "claimbench/engine/worker/buckets"
    package.mkdir()
    try:
        shutil.copy(module, package / "__init__.py")
        before = designs(tree)
        edited_init = (package / "__init__.py").read_text() + "\nPROBE = 1\n"
        _write(package / "__init__.py", edited_init.encode())
        after = designs(tree)
        assert before["bucket_padding"] != after["bucket_padding"]
    finally:
        shutil.rmtree(package)
        _write(module, module.read_bytes())  # a fresh listing: the cached lookup is stale
