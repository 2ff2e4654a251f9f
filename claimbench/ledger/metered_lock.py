"""One metered run at a time per results store, across processes.

The budget gate (spend_gate.py) compares a run's estimate with what the ledger says is left,
but a run's spend reaches the ledger only as its runs finish. Two metered runs started side
by side (two `claimbench mcp` servers on one store, or one beside `claimbench run`) could each
fit the remaining budget and together spend past it. So a metered run holds an exclusive lock
on ``.metered.lock`` in the results store for its whole life, taken without waiting: a second
metered run, from any process, is refused at once. The lock is ``flock``, so the kernel drops
it when the holder exits or dies and no stale lock is ever left behind. Unmetered runs (no
spend) take no lock and are never refused by it.

The lock belongs to the open file: a descriptor passed to a child process (an MCP job's
worker) keeps it held in the child after the parent closes its own copy.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

LOCK_FILE = ".metered.lock"
_HOLDER_BYTES = 200


class MeteredRunBusy(RuntimeError):
    """Another metered run holds the store's lock; the message is one line saying so."""


def lock_path(store: Path) -> Path:
    """The metered-run lock file of the results store ``store``."""
    return store / LOCK_FILE


def hold(store: Path) -> int:
    """Take ``store``'s metered-run lock without waiting and return the descriptor that holds
    it (closing it, or the process ending, releases the lock). MeteredRunBusy when another
    metered run holds it."""
    store.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path(store), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise MeteredRunBusy(
            f"another metered run{holder} is spending from {store}; metered runs go one at a "
            "time so that together they cannot spend past the budget: wait for it to end"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    _record_holder(fd)
    return fd


def adopt(fd: int) -> None:
    """Confirm that ``fd``, a descriptor handed down by the process that took the lock, holds
    it, and name this process as the holder. MeteredRunBusy when it does not hold it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a no-op on the holding open file
    except OSError as err:
        raise MeteredRunBusy(f"the metered-run lock handed down was not held: {err}") from None
    _record_holder(fd)


@contextmanager
def held(store: Path) -> Iterator[None]:
    """Hold ``store``'s metered-run lock for the ``with`` body (MeteredRunBusy if another
    metered run holds it)."""
    fd = hold(store)
    try:
        yield
    finally:
        os.close(fd)


def _record_holder(fd: int) -> None:
    """Write who holds the lock into the lock file, for the refusal another run prints."""
    since = datetime.now(UTC).isoformat(timespec="seconds")
    record = f"pid {os.getpid()} since {since}\n".encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
    except OSError:
        pass  # the lock is what matters; its note is only for the message


def _holder(fd: int) -> str:
    """`` (pid N since T)`` from the lock file, or "" when it says nothing readable."""
    try:
        text = os.pread(fd, _HOLDER_BYTES, 0).decode(errors="replace").strip()
    except OSError:
        return ""
    return f" ({text})" if text and text.isprintable() else ""
