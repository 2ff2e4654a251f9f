"""Run claimbench as a base install would have it (`pip install claimbench`, no extras).

    python tests/base_install.py '[["list"], ["serve", "--help"]]'

Every top-level module of an installed distribution that the base install does not bring
(the closure of claimbench's requirements without extras) is made unimportable, then each
argument list is run through the CLI in this process. Prints one JSON object: the blocked
module names and, per argument list, its exit code and output. With ``--import MOD ...``
instead, imports each module (the current directory on the path: experiments/) and reports
what it raised.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.metadata as metadata
import json
import os
import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def base_distributions() -> set[str]:
    """claimbench's distribution and those its requirements bring, extras left out (an
    extra a requirement itself names is followed)."""
    seen: set[str] = set()
    todo = [("claimbench", frozenset())]
    while todo:
        name, extras = todo.pop()
        key = canonicalize_name(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if key in seen and not extras:
            continue
        seen.add(key)
        for text in dist.requires or []:
            req = Requirement(text)
            wanted = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in wanted):
                todo.append((req.name, frozenset(req.extras)))
    return seen


def blocked_modules() -> set[str]:
    """Top-level modules whose every distribution is outside the base install."""
    base = base_distributions()
    blocked = set()
    for module, dists in metadata.packages_distributions().items():
        if all(canonicalize_name(d) not in base for d in dists):
            blocked.add(module)
    return blocked


class Blocker(importlib.abc.MetaPathFinder):
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r} (not in a base install)",
                                      name=fullname)  # fmt: skip
        return None


def main() -> None:
    blocked = blocked_modules()
    sys.meta_path.insert(0, Blocker(blocked))
    report: dict = {"blocked": sorted(blocked)}
    if sys.argv[1] == "--import":
        sys.path.insert(0, os.getcwd())  # the project root: experiments/
        report["imports"] = {}
        for name in sys.argv[2:]:
            try:
                importlib.import_module(name)
                report["imports"][name] = None
            except BaseException as e:  # noqa: BLE001 - the report is the point
                report["imports"][name] = f"{type(e).__name__}: {e}"
    else:
        from typer.testing import CliRunner

        from claimbench.cli.main import app

        runner = CliRunner()
        report["runs"] = []
        for args in json.loads(sys.argv[1]):
            result = runner.invoke(app, args)
            error = None if result.exception is None else repr(result.exception)
            if isinstance(result.exception, SystemExit):
                error = None
            report["runs"].append(
                {"args": args, "exit_code": result.exit_code, "output": result.output,
                 "exception": error}
            )  # fmt: skip
    print(json.dumps(report))


if __name__ == "__main__":
    main()
