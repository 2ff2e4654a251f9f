"""An experiment's design hash: everything in the project that decides what a claim's run measures.

A run is evidence for the design that produced it. When the experiment, any project module it
reaches, or a data file those modules read changes (a metric redefined, a scheduler's choice
altered, a bucket filter dropped, a default page size doubled, a weight file retrained), its
earlier runs measured something else and must not be scored as if they measured today's code.

The design is:

- modules: the experiment and every project module (``claimbench.*``, ``experiments.*``) it
  reaches, transitively, through import statements (module level and inside functions, relative
  ones resolved) and module names written as strings (a probe launched with ``python -m``); every
  package whose module is reached brings its ``__init__`` too, since importing a submodule runs
  it. The engine, kernels, models, serving and the run context are all included: they are what
  a measurement measures, so a run of older engine code is not evidence for today's engine. Only
  the modules that score or display stored runs (SCORING_ONLY) are left out, with what only
  they import.
- data files: the non-Python files of every reached package (its directory and the plain
  directories below it, not subpackages): the model weights, tokenizers and held-out corpus under
  ``claimbench/models/assets``, the native kernel sources under ``claimbench/kernels/native``.
  Documentation (``*.md``) and build caches are left out.

A module is hashed as its syntax tree with docstrings removed (comments never reach the tree) and
imports kept, aliases included: ``from m import A as B, B as A`` swaps what every later ``A``
means, so it is a different module. A data file is hashed by its bytes. The design hash is the
sha256 of the sorted ``name digest`` lines of both. A reworded comment or docstring leaves it
alone; any change to what a statement does, or to a byte a run reads, moves it.

Hashing is cached per file by (path, size, mtime, inode), so scoring every claim reads each
shared module and weight file once per process.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import claimbench

EXPERIMENTS_PACKAGE = "experiments"
PROJECT_PACKAGES = ("claimbench", EXPERIMENTS_PACKAGE)
_MODULE_STRING = re.compile(r"^(?:claimbench|experiments)(?:\.\w+)+$")
# Files beside a package's modules that no run reads: documentation and build or byte caches.
_NOT_DATA_SUFFIXES = (".py", ".pyc", ".md", ".orig")
_NOT_DATA_DIRS = frozenset({"__pycache__", "build", ".pytest_cache"})
# Modules that score, describe or display stored runs and never run in one: the scorer reapplies
# today's rules to what a run recorded, so changing them re-scores runs rather than voiding them.
# An experiment reaches them only through its figures hook (lab/figures, the site's charts).
SCORING_ONLY = (
    "claimbench.cli",
    "claimbench.lab.figures",
    "claimbench.site",
    "claimbench.harness.calibration",
    "claimbench.harness.condition_scores",
    "claimbench.harness.design",
    "claimbench.harness.intervals",
    "claimbench.harness.run_checks",
    "claimbench.harness.score_file",
    "claimbench.harness.score_table",
    "claimbench.harness.scoring",
    "claimbench.harness.selection",
)

# Per-process caches, keyed by a file's stat (or a directory's for whether a module exists), so
# scoring every claim reads each shared module and weight file once.
_CODE_CACHE: dict[tuple[str, int, int, int], tuple[str, tuple[ast.AST, ...]]] = {}
_MODULE_CACHE: dict[str, tuple[int, Path | None]] = {}
_NAMES_CACHE: dict[tuple[tuple[str, int, int, int], str], frozenset[str]] = {}
_BYTES_CACHE: dict[tuple[str, int, int, int], str] = {}


@dataclass(frozen=True)
class Design:
    """An experiment's design: its hash, the modules and the data files hashed."""

    hash: str  # sha256 hex, first 16
    modules: tuple[str, ...]  # dotted names, sorted
    data_files: tuple[str, ...] = ()  # paths relative to their package root, sorted

    def as_meta(self) -> dict[str, object]:
        """What meta.json records."""
        return {
            "design_hash": self.hash,
            "design_modules": list(self.modules),
            "design_data_files": list(self.data_files),
        }


def package_root() -> Path:
    """The directory holding the installed ``claimbench`` package."""
    return Path(claimbench.__file__).resolve().parent.parent


def _in_project(name: str) -> bool:
    return name.split(".", 1)[0] in PROJECT_PACKAGES


def module_file(name: str, experiments_dir: Path, source_root: Path | None = None) -> Path | None:
    """The source file of dotted module ``name`` (a module or a package's __init__), or None.

    ``experiments.*`` lives in ``experiments_dir``; ``claimbench.*`` under ``source_root``
    (default: the installed package's parent).
    """
    parts = name.split(".")
    if parts[0] == EXPERIMENTS_PACKAGE:
        base = os.path.join(experiments_dir, *parts[1:])
    elif parts[0] == "claimbench":
        base = os.path.join(source_root or package_root(), *parts)
    else:
        return None
    # Whether a module exists changes only when its directory's listing does.
    parent = os.path.dirname(base)
    try:
        listed = os.stat(parent).st_mtime_ns
    except OSError:
        return None
    cached = _MODULE_CACHE.get(base)
    if cached is not None and cached[0] == listed:
        return cached[1]
    found = None
    # A package shadows a module of the same name, as Python's import finds them.
    for candidate in (os.path.join(base, "__init__.py"), f"{base}.py"):
        if os.path.isfile(candidate):
            found = Path(candidate)
            break
    _MODULE_CACHE[base] = (listed, found)
    return found


def _file_key(file: Path) -> tuple[str, int, int, int]:
    st = file.stat()
    return (str(file), st.st_size, st.st_mtime_ns, st.st_ino)


def _parsed(file: Path) -> tuple[str, tuple[ast.AST, ...]]:
    """(code hash, import nodes and string constants) of ``file``, cached by its stat."""
    key = _file_key(file)
    cached = _CODE_CACHE.get(key)
    if cached is None:
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
        refs = tuple(
            node
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            or (isinstance(node, ast.Constant) and isinstance(node.value, str))
        )
        code = _WithoutDocstrings().visit(tree)
        cached = (hashlib.sha256(ast.dump(code).encode()).hexdigest(), refs)
        _CODE_CACHE[key] = cached
    return cached


def bytes_hash(file: Path) -> str:
    """sha256 hex of ``file``'s bytes, cached by its stat."""
    key = _file_key(file)
    digest = _BYTES_CACHE.get(key)
    if digest is None:
        h = hashlib.sha256()
        with file.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        digest = _BYTES_CACHE[key] = h.hexdigest()
    return digest


def _package_of(name: str, file: Path) -> str:
    """The package ``name`` belongs to (itself when ``file`` is a package's __init__)."""
    return name if file.name == "__init__.py" else name.rpartition(".")[0]


def _referenced_names(name: str, file: Path, refs: tuple[ast.AST, ...]) -> set[str]:
    """Every absolute module name the module ``name`` in ``file`` imports or names in a string;
    ``from pkg import x`` yields both ``pkg`` and ``pkg.x`` (x may be a module)."""
    names: set[str] = set()
    for node in refs:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = _package_of(name, file).split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, module] if module else base)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant):
            names.update(_MODULE_STRING.findall(node.value))
    return {n for n in names if n and _in_project(n)}


def _ancestors(name: str) -> list[str]:
    """``a.b.c`` -> ``a``, ``a.b``: the packages whose __init__ importing ``name`` runs."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _wanted_modules(name: str, file: Path) -> frozenset[str]:
    """The project modules that importing module ``name`` (in ``file``) runs: each one it
    references and their packages; cached by the file's stat."""
    key = (_file_key(file), name)
    wanted = _NAMES_CACHE.get(key)
    if wanted is None:
        refs = _referenced_names(name, file, _parsed(file)[1])
        wanted = frozenset(refs).union(*(_ancestors(ref) for ref in refs))
        _NAMES_CACHE[key] = wanted
    return wanted


def _scores_or_shows(name: str) -> bool:
    """Whether module ``name`` only scores, describes or displays runs (SCORING_ONLY)."""
    return any(name == m or name.startswith(f"{m}.") for m in SCORING_ONLY)


def design_modules(experiment_file: Path, source_root: Path | None = None) -> dict[str, Path]:
    """The design's modules, dotted name -> file: the experiment itself (named
    ``experiments.<stem>``) and every project module it reaches (see the module docstring)."""
    experiments_dir = experiment_file.parent
    source_root = source_root or package_root()
    found = {f"{EXPERIMENTS_PACKAGE}.{experiment_file.stem}": experiment_file}
    not_modules: set[str] = set()  # attributes imported from a module, namespace directories
    todo = [(f"{EXPERIMENTS_PACKAGE}.{experiment_file.stem}", experiment_file)]
    while todo:
        name, source = todo.pop()
        for ref in sorted(_wanted_modules(name, source) - found.keys() - not_modules):
            file = None if _scores_or_shows(ref) else module_file(ref, experiments_dir, source_root)
            if file is None:
                not_modules.add(ref)
                continue
            found[ref] = file
            todo.append((ref, file))
    return found


def _is_data(file: Path) -> bool:
    return (
        file.is_file() and not file.name.startswith(".") and file.suffix not in _NOT_DATA_SUFFIXES
    )


def package_data(package_dir: Path) -> list[Path]:
    """The data files of the package in ``package_dir``: its non-Python files and those of the
    plain directories below it (a subdirectory with an __init__.py is a package of its own)."""
    files = []
    for entry in sorted(package_dir.iterdir()):
        if entry.is_dir():
            if entry.name in _NOT_DATA_DIRS or (entry / "__init__.py").is_file():
                continue
            files.extend(f for f in sorted(entry.rglob("*")) if _is_data(f))
        elif _is_data(entry):
            files.append(entry)
    return files


def design_data_files(modules: dict[str, Path]) -> dict[str, Path]:
    """Label -> file for the data files of every package of ``modules`` (the experiments
    directory is not a package of data: only its modules are hashed)."""
    found: dict[str, Path] = {}
    for name, file in modules.items():
        if name.startswith(f"{EXPERIMENTS_PACKAGE}.") or file.name != "__init__.py":
            continue
        for data in package_data(file.parent):
            label = f"{name}:{data.relative_to(file.parent).as_posix()}"
            found[label] = data
    return found


class _WithoutDocstrings(ast.NodeTransformer):
    """Removes docstrings, which describe a module but never change what it does."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        body = getattr(node, "body", None)
        if isinstance(node, _DOCUMENTED) and body and _is_docstring(body[0]):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
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
    return _parsed(file)[0]


def design_of(experiment_file: Path, source_root: Path | None = None) -> Design:
    """The design hash of the experiment in ``experiment_file``, its ``claimbench`` modules read
    from ``source_root`` (default: the installed package's parent); OSError or SyntaxError when a
    file of the design cannot be read."""
    modules = design_modules(experiment_file, source_root)
    data = design_data_files(modules)
    lines = [f"{name} {code_hash(file)}" for name, file in modules.items()]
    lines += [f"{label} {bytes_hash(file)}" for label, file in data.items()]
    digest = hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()
    return Design(digest[:16], tuple(sorted(modules)), tuple(sorted(data)))


def source_root_of(project_root: Path) -> Path | None:
    """Where a project's ``claimbench`` sources are: ``project_root`` when it holds the package
    (a checkout), else None (the installed package)."""
    return project_root if (project_root / "claimbench" / "__init__.py").is_file() else None
