"""Concurrent adds to a tenants or agents file: every printed secret lands in the file and
authenticates, from processes and from parallel `claimbench tenants add` / `agents add`."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest

from claimbench.ops.agents import Agents, add_agent
from claimbench.platform.file_lock import lock_path
from claimbench.serving.tenants import TenantKeys, add_tenant

NUM_PROCESSES = 8
ADDS_EACH = 5


def _add_many(kind: str, path: str, worker: int, start, out) -> None:
    start.wait()  # every process reads the file at about the same moment
    for i in range(ADDS_EACH):
        name = f"w{worker}-{i}"
        if kind == "tenants":
            secret = add_tenant(Path(path), name, {})
        else:
            secret = add_agent(Path(path), name, None)
        out.put((name, secret))


@pytest.mark.parametrize("kind", ["tenants", "agents"])
def test_adds_from_eight_processes_all_land(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"{kind}.yaml"
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Barrier(NUM_PROCESSES), ctx.Queue()
    procs = [
        ctx.Process(target=_add_many, args=(kind, str(path), w, start, out))
        for w in range(NUM_PROCESSES)
    ]
    for p in procs:
        p.start()
    printed = dict(out.get(timeout=120) for _ in range(NUM_PROCESSES * ADDS_EACH))
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert len(printed) == NUM_PROCESSES * ADDS_EACH
    if kind == "tenants":
        keys = TenantKeys.load(path)
        assert len(keys.tenants) == len(printed)
        assert all(keys.tenant_for(key) == name for name, key in printed.items())
    else:
        agents = Agents.load(path)
        assert len(agents.agents) == len(printed)
        assert all(agents.agent_for(token).name == name for name, token in printed.items())
    assert lock_path(path).exists() and lock_path(path).parent == path.parent


@pytest.mark.parametrize("kind", ["tenants", "agents"])
def test_parallel_cli_adds_all_land(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"{kind}.yaml"
    names = [f"c{i}" for i in range(4)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "claimbench", kind, "add", name, "--file", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]
    printed = {}
    for name, p in zip(names, procs, strict=True):
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
        printed[name] = stdout.strip()
    if kind == "tenants":
        keys = TenantKeys.load(path)
        assert all(keys.tenant_for(key) == name for name, key in printed.items())
    else:
        agents = Agents.load(path)
        assert all(agents.agent_for(token).name == name for name, token in printed.items())


@pytest.mark.parametrize("kind", ["tenants", "agents"])
def test_an_add_through_a_symlink_updates_the_file_it_names(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"{kind}.yaml"
    link = tmp_path / f"link-{kind}.yaml"
    add = (lambda p, n: add_tenant(p, n, {})) if kind == "tenants" else add_agent_read
    add(path, "first")
    link.symlink_to(path)
    add(link, "second")  # the other spelling of the same file
    add(path, "third")
    assert link.is_symlink() and link.resolve() == path
    # One lock for both spellings: the lock beside the real file, none beside the link.
    assert lock_path(path).exists() and not lock_path(link).exists()
    text = path.read_text()
    assert all(f"name: {n}" in text for n in ("first", "second", "third"))


def add_agent_read(path: Path, name: str) -> str:
    return add_agent(path, name, None)
