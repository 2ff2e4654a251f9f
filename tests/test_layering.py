"""The layering rule: a module imports only from its own package or a package on a lower rank
(docs/architecture.md), and inside engine/, serving/ and lab/ only from its own subpackage or
top-level module or one on a lower rank.

Every import in claimbench/ counts, at module level or inside a function: a lazy import of a
higher rank is the same dependency, deferred. No two packages share a rank, so two that import
each other fail the check whichever imports upward.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "claimbench"
# Lowest first; a package imports only itself and the packages before it.
LAYERS = (
    "platform",
    "kernels",
    "models",
    "workload",
    "engine",
    "serving",
    "training",
    "hardware",
    "tpucompile",
    "harness",
    "ledger",
    "lab",
    "bench",
    "tpucheck",
    "site",
    "ops",
    "cli",
)
LAYER = {package: rank for rank, package in enumerate(LAYERS)}
# Inside a package, lowest first: each subpackage or top-level module ("unit") imports only
# itself and the units before it. The package's __init__ (its public API) sits above them all.
UNIT_RANKS = {
    "engine": (
        "sampling_params",
        "outputs",
        "config_ladder",
        "config_tenants",
        "config",
        "request",
        "request_checks",
        "metrics",
        "kv",
        "worker",
        "spec",
        "sched",
        "stats",
        "engine",
        "build",
    ),
    "serving": (
        "tenants",
        "monitoring",
        "engine_loop",
        "api",
        "supervisor",
        "server",
        "serve_setup",
        "clients",
    ),
    "lab": ("metrics", "engines", "load", "quality", "probes", "speculative", "figures"),
}
PACKAGE_API = "__init__"


def imported_modules(tree: ast.AST) -> set[str]:
    """Absolute module names ``tree`` imports (``from pkg import name`` counts ``pkg``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def package_of(module: str) -> str | None:
    """The claimbench package ``module`` belongs to, or None outside claimbench."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "claimbench" else None


def upward_imports(root: Path) -> list[str]:
    """Every import in ``root`` (a claimbench tree) of a package on a higher rank, as
    'file: imported module'; ValueError for a package the rule does not place."""
    found = []
    for file in sorted(root.rglob("*.py")):
        relative = file.relative_to(root)
        if len(relative.parts) < 2:
            continue  # claimbench/__init__.py and __main__.py sit above every layer
        own = relative.parts[0]
        if own not in LAYER:
            raise ValueError(f"package {own!r} is on no layer: add it to LAYERS")
        for module in sorted(imported_modules(ast.parse(file.read_text(encoding="utf-8")))):
            target = package_of(module)
            if target is not None and target in LAYER and LAYER[target] > LAYER[own]:
                found.append(f"claimbench/{relative}: {module}")
            if module.split(".")[0] in ("experiments", "benchmarks", "tests"):
                found.append(f"claimbench/{relative}: {module}")
    return found


def imported_units(tree: ast.AST, package: str, units: set[str]) -> set[str]:
    """The units of claimbench.``package`` that ``tree`` imports; PACKAGE_API for a name taken
    from the package itself that is none of ``units`` (``from claimbench.engine import
    LLMEngine``)."""
    prefix = ("claimbench", package)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [tuple(alias.name.split(".")) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [tuple(node.module.split("."))]
            if modules[0] == prefix:  # each name is a unit, or an attribute of the package
                modules = [prefix + (a.name,) if a.name in units else prefix for a in node.names]
        else:
            continue
        for parts in modules:
            if parts[:2] == prefix:
                found.add(parts[2] if len(parts) > 2 else PACKAGE_API)
    return found


def upward_unit_imports(root: Path, package: str, ranks: tuple[str, ...]) -> list[str]:
    """Every import in ``root``/``package`` of a unit on a higher rank (or of the package's
    API from inside it), as 'file: unit'; ValueError for a unit ``ranks`` does not place."""
    rank = {unit: i for i, unit in enumerate(ranks)} | {PACKAGE_API: len(ranks)}
    found = []
    for file in sorted((root / package).rglob("*.py")):
        relative = file.relative_to(root / package)
        own = relative.parts[0] if len(relative.parts) > 1 else file.stem
        if own == PACKAGE_API:
            continue
        if own not in rank:
            raise ValueError(f"{package}/{own} has no rank: add it to UNIT_RANKS")
        for unit in sorted(
            imported_units(ast.parse(file.read_text(encoding="utf-8")), package, set(ranks))
        ):
            if unit not in rank:
                raise ValueError(f"{package}/{relative} imports {unit!r}, which has no rank")
            if rank[unit] > rank[own]:
                found.append(f"claimbench/{package}/{relative}: {unit}")
    return found


def units_of(directory: Path) -> set[str]:
    """The top-level modules and subpackages of a package directory."""
    modules = {p.stem for p in directory.glob("*.py") if p.stem != PACKAGE_API}
    return modules | {p.name for p in directory.iterdir() if (p / "__init__.py").is_file()}


def test_no_module_imports_a_higher_layer():
    assert upward_imports(PACKAGE) == []


def test_every_package_is_on_a_layer():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(LAYER)


UNIT_PACKAGES = ["engine", "serving", "lab"]


@pytest.mark.parametrize("package", UNIT_PACKAGES)
def test_no_module_imports_a_higher_unit(package):
    assert upward_unit_imports(PACKAGE, package, UNIT_RANKS[package]) == []


@pytest.mark.parametrize("package", UNIT_PACKAGES)
def test_every_unit_has_a_rank(package):
    assert units_of(PACKAGE / package) == set(UNIT_RANKS[package])


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "from claimbench.serving.api.app import create_app\n",
            ["claimbench/engine/x.py: claimbench.serving.api.app"],
        ),
        (
            "def f():\n    import claimbench.cli.main\n",
            ["claimbench/engine/x.py: claimbench.cli.main"],
        ),
        ("from claimbench.kernels import reference\nfrom claimbench.engine import config\n", []),
        ("from experiments import kv_int8\n", ["claimbench/engine/x.py: experiments"]),
    ],
)
def test_the_check_catches_an_upward_import(tmp_path, source, expected):
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "x.py").write_text(source)
    assert upward_imports(tmp_path) == expected


def test_packages_next_to_each_other_are_ranked_too(tmp_path):
    # harness sits below lab: the experiment helpers build on RunContext, never the reverse.
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "x.py").write_text("from claimbench.lab.load import tenant_runs\n")
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "y.py").write_text("from claimbench.harness.context import RunContext\n")
    assert upward_imports(tmp_path) == ["claimbench/harness/x.py: claimbench.lab.load"]


@pytest.mark.parametrize(
    ("where", "source", "expected"),
    [
        ("kv/x.py", "from claimbench.engine.sched.scheduler import X\n", ["kv/x.py: sched"]),
        ("kv/x.py", "def f():\n    from claimbench.engine import sched\n", ["kv/x.py: sched"]),
        ("kv/x.py", "from claimbench.engine import LLMEngine\n", ["kv/x.py: __init__"]),
        ("config.py", "import claimbench.engine.worker.runner\n", ["config.py: worker"]),
        ("sched/x.py", "from claimbench.engine.kv.block_manager import BlockManager\n", []),
        ("sched/x.py", "from claimbench.engine.sched import policies\n", []),
        ("sched/x.py", "from claimbench.serving.api import app\n", []),  # the package check's
    ],
)
def test_the_unit_check_catches_an_upward_import(tmp_path, where, source, expected):
    file = tmp_path / "engine" / where
    file.parent.mkdir(parents=True)
    file.write_text(source)
    ranks = ("config", "kv", "worker", "sched")
    found = upward_unit_imports(tmp_path, "engine", ranks)
    assert found == [f"claimbench/engine/{e}" for e in expected]


def test_an_unranked_unit_is_an_error(tmp_path):
    (tmp_path / "engine" / "newpart").mkdir(parents=True)
    (tmp_path / "engine" / "newpart" / "x.py").write_text("")
    with pytest.raises(ValueError, match="newpart"):
        upward_unit_imports(tmp_path, "engine", ("config",))
