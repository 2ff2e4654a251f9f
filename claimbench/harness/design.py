"""An experiment's design hash: the code that decides what a claim's run measures.

A run is evidence for the design that produced it. When an experiment's module or a helper it
uses changes (a metric redefined, a reference swapped, a load re-sized), its earlier runs
measured something else and must not be scored as if they measured today's design.

The design is the experiment's module and every module it imports, transitively, from the
experiment-helper packages (DESIGN_PACKAGES: experiments, claimbench.lab, claimbench.workload,
claimbench.hardware), found by reading import statements (module level and inside functions) and
module names written as strings (a probe launched with ``python -m``). It leaves out:

- the engine, kernels, models and serving: the system under test, whose improvements the
  scoreboard should see, so they never invalidate a run;
- the scoring core (claimbench.harness) and the records (claimbench.ledger): how a run is
  stored, described and read does not change what it measured.

The hash is of the code, not of where it lives or how it is described: each module's syntax
tree with its import statements and docstrings removed and module names written in strings cut
to their last part (comments never reach the tree), hashed, and the sorted module hashes hashed
again, names left out. Moving a helper to another package, renaming an import or rewording a
comment leaves a design's hash alone; changing what any statement does moves it.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import claimbench

EXPERIMENTS_PACKAGE = "experiments"
DESIGN_PACKAGES = (
    EXPERIMENTS_PACKAGE,
    "claimbench.lab",
    "claimbench.workload",
    "claimbench.hardware",
)
_MODULE_STRING = re.compile(r"^(?:claimbench|experiments)(?:\.\w+)+$")
# A module name anywhere in a string (a usage line, a ``-m`` argument): cut to its last part.
_MODULE_NAME = re.compile(r"\b(?:claimbench|experiments)(?:\.\w+)+")


def _last_part(match: re.Match[str]) -> str:
    return f"module:{match.group(0).rsplit('.', 1)[-1]}"


@dataclass(frozen=True)
class Design:
    """An experiment's design: its hash and the modules hashed."""

    hash: str  # sha256 hex, first 16
    modules: tuple[str, ...]  # dotted names, sorted

    def as_meta(self) -> dict[str, object]:
        """What meta.json records."""
        return {"design_hash": self.hash, "design_modules": list(self.modules)}


def _in_design(name: str) -> bool:
    """Whether module ``name`` is part of a design (a package's own __init__ is not)."""
    return any(name.startswith(f"{package}.") for package in DESIGN_PACKAGES)


def module_file(name: str, experiments_dir: Path) -> Path | None:
    """The source file of dotted module ``name`` (a module or a package's __init__), or None."""
    parts = name.split(".")
    if parts[0] == EXPERIMENTS_PACKAGE:
        base = experiments_dir.joinpath(*parts[1:])
    elif parts[0] == "claimbench":
        base = Path(claimbench.__file__).parent.joinpath(*parts[1:])
    else:
        return None
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_names(tree: ast.AST) -> set[str]:
    """Every absolute module name ``tree`` imports or names in a string constant; ``from pkg
    import name`` yields both ``pkg`` and ``pkg.name`` (name may be a module)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.update(_MODULE_STRING.findall(node.value))
    return names


def design_modules(experiment_file: Path) -> dict[str, Path]:
    """The design's modules, dotted name -> file: the experiment itself (named
    ``experiments.<stem>``) and every design module it reaches through imports."""
    experiments_dir = experiment_file.parent
    found = {f"{EXPERIMENTS_PACKAGE}.{experiment_file.stem}": experiment_file}
    todo = [experiment_file]
    while todo:
        source = todo.pop()
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
        for name in sorted(_imported_names(tree)):
            if name in found or not _in_design(name):
                continue
            file = module_file(name, experiments_dir)
            if file is None:
                continue  # an attribute imported from a module, not a module of its own
            found[name] = file
            todo.append(file)
    return found


class _CodeOnly(ast.NodeTransformer):
    """Removes from a module's tree what does not change what it does: imports, docstrings, and
    the package part of module names written as strings."""

    def visit_Import(self, node: ast.Import) -> None:
        return None

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        return None

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        if isinstance(node.value, str):
            return ast.Constant(_MODULE_NAME.sub(_last_part, node.value))
        return node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        body = getattr(node, "body", None)
        if isinstance(node, _DOCUMENTED) and body and _is_docstring(body[0]):
            node.body = body[1:]  # type: ignore[attr-defined]
        return super().generic_visit(node)


_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def code_hash(file: Path) -> str:
    """sha256 hex of what the module in ``file`` does (see the module docstring)."""
    tree = _CodeOnly().visit(ast.parse(file.read_text(encoding="utf-8"), filename=str(file)))
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def design_of(experiment_file: Path) -> Design:
    """The design hash of the experiment in ``experiment_file``; OSError or SyntaxError when a
    module of the design cannot be read."""
    modules = design_modules(experiment_file)
    digest = hashlib.sha256()
    for module_digest in sorted(code_hash(file) for file in modules.values()):
        digest.update(f"{module_digest}\n".encode())
    return Design(digest.hexdigest()[:16], tuple(sorted(modules)))
