"""Replacing a file all or nothing: a reader sees the old text or the new, never half of it."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


def replace_text(path: Path, text: str, *, new_mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` through a temp file beside it, then rename it over ``path``.

    The temp file gets a fresh random name (a planted symlink at a fixed name would be
    followed), keeps ``path``'s mode (``new_mode`` for a new file), and is synced before the
    rename; the directory is synced after it, so the rename itself survives a crash. On any
    error the temp file is removed and ``path`` is as it was.
    """
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else new_mode
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
