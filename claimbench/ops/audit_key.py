"""The audit log's key: 32 random bytes in a 0600 file that only the MCP server's user reads.

Every line, the head and each checkpoint of the audit log carry an HMAC-SHA256 under this key
(ops/audit.py), so whoever can write the log but not read the key cannot forge or re-hash a
line. The key lives outside the log's directory: a writer of that directory must not be able
to replace the key along with the log. Its path is ``--audit-key-file``, else
$CLAIMBENCH_AUDIT_KEY_FILE, else ``$XDG_CONFIG_HOME/claimbench/audit.key`` (``~/.config``
when XDG_CONFIG_HOME is unset).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Any

from claimbench.platform.regular_file import open_regular, read_fd

KEY_FILE_ENV_VAR = "CLAIMBENCH_AUDIT_KEY_FILE"
_KEY_HEX = re.compile(r"[0-9a-f]{64}")
# Domain separation: a line's MAC can never pass for a head's or a checkpoint's.
LINE, HEAD, CHECKPOINT = "line", "head", "checkpoint"


def default_key_file() -> Path:
    """Where the key lives unless a flag or $CLAIMBENCH_AUDIT_KEY_FILE says otherwise."""
    if os.environ.get(KEY_FILE_ENV_VAR):
        return Path(os.environ[KEY_FILE_ENV_VAR])
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "claimbench" / "audit.key"


def check_outside(key_file: Path, log: Path, what: str = "the audit key") -> None:
    """ValueError when ``key_file`` lies in the log's directory (or below it)."""
    folder = log.resolve().parent
    if key_file.resolve().is_relative_to(folder):
        raise ValueError(
            f"{what} {key_file} is inside the audit log's directory {folder}: "
            "whoever can rewrite the log could replace it too"
        )


def load_key(key_file: Path) -> bytes:
    """The key in ``key_file``; ValueError naming the file when it is missing, malformed, not a
    regular file (a symlink is refused), not owned by this user, or readable by group/others."""
    try:
        fd = open_regular(key_file, os.O_RDONLY)
    except FileNotFoundError:
        raise ValueError(f"audit key {key_file} is missing: cannot check the log") from None
    except OSError as e:
        raise ValueError(f"cannot read audit key {key_file}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            raise ValueError(
                f"audit key {key_file} is owned by uid {st.st_uid}, not this user ({os.getuid()})"
            )
        if st.st_mode & 0o077:
            raise ValueError(
                f"audit key {key_file} has mode {stat.S_IMODE(st.st_mode):04o}: others could "
                "read it; chmod 600 it (and replace it if they may have)"
            )
        text = read_fd(fd, 256, key_file).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    if not _KEY_HEX.fullmatch(text):
        raise ValueError(f"audit key {key_file} is not 64 hex digits")
    return bytes.fromhex(text)


def load_or_create_key(key_file: Path, log: Path | None = None) -> bytes:
    """The key in ``key_file``, created 0600 (its directory 0700) when missing. Two servers
    starting at once agree: the file appears whole, by a hard link that fails if it exists.
    ValueError when it is missing but ``log`` already holds lines: a new key would leave the
    old lines unverifiable, and a deleted key must be restored, not replaced."""
    if not key_file.exists():
        if log is not None and log.exists() and log.stat().st_size > 0:
            raise ValueError(
                f"audit key {key_file} is missing but {log} already holds lines: "
                "restore the key that signed them (or move the log aside)"
            )
        key_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=key_file.parent, prefix=".audit-key.", suffix=".tmp")
        try:
            os.write(fd, (secrets.token_hex(32) + "\n").encode())
            os.fsync(fd)
            os.close(fd)
            # FileExistsError: another server created it first; use that one.
            with contextlib.suppress(FileExistsError):
                os.link(tmp, key_file)
        finally:
            os.unlink(tmp)
    return load_key(key_file)


def canonical(record: dict[str, Any]) -> str:
    """The one serialisation of ``record`` that the log, head and checkpoint hold: sorted keys,
    no spaces, ASCII only (so the bytes on disk are exactly what the MAC covers)."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def mac(key: bytes, kind: str, record: dict[str, Any]) -> str:
    """HMAC-SHA256 hex of ``record``'s canonical JSON (without its ``mac``), for ``kind``."""
    text = canonical({k: v for k, v in record.items() if k != "mac"})
    return hmac.new(key, f"{kind}\0{text}".encode(), hashlib.sha256).hexdigest()


def mac_ok(key: bytes, kind: str, record: dict[str, Any]) -> bool:
    """Whether ``record['mac']`` is its MAC under ``key`` (constant-time)."""
    given = record.get("mac")
    return isinstance(given, str) and hmac.compare_digest(given, mac(key, kind, record))
