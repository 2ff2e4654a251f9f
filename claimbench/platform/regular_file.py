"""Opening a file that someone else may be able to replace: only a regular file, never through a
symbolic link, never blocking.

A writer of a file's directory can put a symlink there (the server would then append to any
file it can write), a FIFO (an open for reading blocks until someone writes it, holding every
lock the opener holds) or a directory. ``open_regular`` opens with O_NOFOLLOW and O_NONBLOCK,
checks with fstat that what it opened is a regular file, and only then makes the descriptor
blocking again; anything else is a ValueError naming the path.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path


def open_regular(path: Path, flags: int, mode: int = 0o600) -> int:
    """A descriptor of the regular file ``path`` opened with ``flags`` (plus O_NOFOLLOW,
    O_NONBLOCK while opening, O_CLOEXEC). ValueError when ``path`` is a symlink, a FIFO, a
    directory or any other non-regular file; OSError (e.g. FileNotFoundError) otherwise."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ValueError(f"{path} is a symbolic link: refused") from None
        if e.errno in (errno.EISDIR, errno.ENXIO):  # ENXIO: a FIFO opened for writing, no reader
            raise ValueError(f"{path} is not a regular file: refused") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a regular file: refused")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int, max_bytes: int, path: Path) -> bytes:
    """All of the open file ``fd`` from its start; ValueError when it exceeds ``max_bytes``."""
    size = os.fstat(fd).st_size
    if size > max_bytes:
        raise ValueError(f"{path} is {size} bytes, more than the {max_bytes} it may hold")
    return os.pread(fd, size, 0)


def read_regular(path: Path, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` (see open_regular), at most ``max_bytes``."""
    fd = open_regular(path, os.O_RDONLY)
    try:
        return read_fd(fd, max_bytes, path)
    finally:
        os.close(fd)
