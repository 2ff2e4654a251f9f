"""An exclusive lock around a read-modify-write of a shared file.

Two writers that each read a file, change it and rename their copy over it lose one of the
changes. The lock is ``flock`` on a separate lock file beside the file (``.NAME.lock``),
not on the file itself: the file is replaced by a rename, and a lock on the old inode would
not exclude a writer that opened the new one.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def lock_path(path: Path) -> Path:
    """The lock file beside ``path``."""
    return path.with_name(f".{path.name}.lock")


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (blocking) for the ``with`` body; the lock file is
    created 0600 if missing and kept (removing it would let a waiter lock a dead inode)."""
    try:
        fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as err:
        # Named as the file asked for: its lock is an implementation detail.
        raise OSError(err.errno, err.strerror, str(path)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
