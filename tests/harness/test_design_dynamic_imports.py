"""The design hash follows imports and the string constants that name project modules
(harness/design.py); a module loaded by a name computed at run time would escape it. Every
call that imports by a non-literal name in the project is listed here with why the hash
still sees what it can load, so a new one fails this test until someone checks it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED = {
    # Names from the module's _PUBLIC table: each a string constant the walker follows.
    ("claimbench/engine/__init__.py", "module"),
    # Third-party extras probed for `doctor`; no project module.
    ("claimbench/cli/extras.py", "name"),
}


def dynamic_imports(path: Path, root: Path = ROOT) -> list[tuple[str, str]]:
    """(file, argument source) for each import_module / __import__ call with a non-literal
    first argument in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name not in ("import_module", "__import__"):
            continue
        arg = node.args[0]
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            found.append((path.relative_to(root).as_posix(), ast.unparse(arg)))
    return found


def test_every_import_by_a_computed_name_is_one_the_design_hash_still_sees():
    files = [
        *ROOT.joinpath("claimbench").rglob("*.py"),
        *ROOT.joinpath("experiments").rglob("*.py"),
    ]
    found = {hit for path in files for hit in dynamic_imports(path)}
    assert found <= CHECKED, f"unchecked imports by a computed name: {sorted(found - CHECKED)}"


def test_the_scan_finds_a_computed_name(tmp_path):
    sample = tmp_path / "probe.py"
    sample.write_text('import importlib\nm = importlib.import_module(f"claimbench.{1}")\n')
    assert dynamic_imports(sample, tmp_path) == [("probe.py", "f'claimbench.{1}'")]
