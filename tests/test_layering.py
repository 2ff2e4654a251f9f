"""The layering rule: a module imports only from its own layer or below (docs/architecture.md).

Every import in claimbench/ counts, at module level or inside a function: a lazy import of a
higher layer is the same dependency, deferred.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "claimbench"
# Lowest first; packages on one layer may import each other.
LAYERS = (
    ("platform",),
    ("kernels",),
    ("models",),
    ("workload",),
    ("engine",),
    ("serving",),
    ("harness", "lab", "tpucheck", "ledger", "hardware", "training"),
    ("site",),
    ("ops",),
    ("cli",),
)
LAYER = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}


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
    """Every import in ``root`` (a claimbench tree) of a package on a higher layer, as
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


def test_no_module_imports_a_higher_layer():
    assert upward_imports(PACKAGE) == []


def test_every_package_is_on_a_layer():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(LAYER)


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
