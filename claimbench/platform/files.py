"""Replacing a file all or nothing: a reader sees the old contents or the new, never half."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path


def replace_file(path: Path, write: Callable[[Path], None], *, new_mode: int = 0o644) -> None:
    """Have ``write`` fill a temp file beside ``path``, then rename it over ``path``.

    The temp file gets a fresh random name (a planted symlink at a fixed name would be
    followed, and two writers at once would share one), keeps ``path``'s mode (``new_mode``
    for a new file), and is synced before the rename; the directory is synced after it, so the
    rename itself survives a crash. On any error the temp file is removed and ``path`` is as
    it was.
    """
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else new_mode
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:  # name the file asked for, not the temp name
        raise OSError(err.errno, err.strerror, str(path)) from err
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def replace_text(path: Path, text: str, *, new_mode: int = 0o644) -> None:
    """``path`` replaced by ``text`` (UTF-8), as replace_file does."""
    replace_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), new_mode=new_mode)
