"""Holding a Ctrl-C until a short block that must finish has finished.

A claim's run is stored before its ledger row is appended. A Ctrl-C between the two (a
cancelled MCP job, whose cancel repeats the signal every second) left a stored run that the
budget gate, which reads only the ledger, never counted. The append runs with the signal held:
a Ctrl-C that arrives meanwhile is delivered once it has finished.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def ctrl_c_held() -> Iterator[list[int]]:
    """Run the block with SIGINT caught and kept; the yielded list holds what arrived, for the
    caller to act on after the block (raise its own KeyboardInterrupt). Off the main thread,
    or where SIGINT has a handler Python did not install, the block runs as it is."""
    arrived: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield arrived
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is None or previous == signal.SIG_IGN:
        yield arrived
        return
    signal.signal(signal.SIGINT, lambda signum, frame: arrived.append(signum))
    try:
        yield arrived
    finally:
        signal.signal(signal.SIGINT, previous)
