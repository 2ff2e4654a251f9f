"""The API process's SCHED_BATCH: every thread switches, later threads inherit it, and it
switches back; run in a child process, so the test process keeps its own policy."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")

CHILD = """
import threading
from claimbench.serving.engine_loop.batch_policy import is_batch, set_batch_policy, thread_ids

gate = threading.Event()
early = threading.Thread(target=gate.wait)
early.start()
assert len(thread_ids()) >= 2 and not any(is_batch(t) for t in thread_ids())
line = set_batch_policy(True)
assert all(is_batch(t) for t in thread_ids()), line
late = []
started = threading.Thread(target=lambda: late.append(is_batch()))
started.start()
started.join()
assert late == [True]  # a thread started afterwards inherits it
print(line)
print(set_batch_policy(False))
assert not any(is_batch(t) for t in thread_ids())
gate.set()
early.join()
"""


def test_every_thread_switches_later_ones_inherit_and_it_switches_back():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = done.stdout.splitlines()
    assert first.startswith("scheduling policy: SCHED_BATCH for this process's")
    assert second.startswith("scheduling policy: normal")
