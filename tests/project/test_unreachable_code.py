"""No statement follows a return, raise, continue or break in its own block: such a line never
runs (a test's check written there passes by never being reached). ruff here has no such rule."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("claimbench", "experiments", "benchmarks", "scripts", "tests")
ENDS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def unreachable(tree: ast.AST) -> list[int]:
    """Line numbers of statements that follow, in the same block, one that always leaves it."""
    lines = []
    for node in ast.walk(tree):
        blocks = [getattr(node, f, None) for f in ("body", "orelse", "finalbody")]
        for block in blocks:
            if not isinstance(block, list):
                continue
            for before, after in zip(block, block[1:], strict=False):
                if isinstance(before, ENDS):
                    lines.append(after.lineno)
    return lines


def test_the_check_finds_a_line_after_a_return():
    source = "def f(x):\n    if x:\n        return 1\n        x += 1\n    return x\n"
    assert unreachable(ast.parse(source)) == [4]


def test_no_statement_is_unreachable():
    found = []
    for tree in TREES:
        for file in sorted((ROOT / tree).rglob("*.py")):
            lines = unreachable(ast.parse(file.read_text(encoding="utf-8")))
            found += [f"{file.relative_to(ROOT)}:{line}" for line in lines]
    assert not found, found
