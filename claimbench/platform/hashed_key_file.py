"""A YAML file of named entries, each holding the sha256 of a secret it was given once: the
tenants of `claimbench serve` (API keys) and the agents of `claimbench mcp` (tokens).

    <section>:
      - name: alice
        <hash field>: 9f86d0...   # sha256 hex of the secret (the secret is never stored)
        ...                       # the caller's own fields

Secrets are 32 random bytes, so an unsalted fast hash is enough (nothing to brute-force,
unlike a password). Adding an entry is a read-modify-write of a file several `add` commands
may change at once, so it runs under the file's lock (platform/file_lock.py): every secret
printed is in the file.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from claimbench.platform.file_lock import locked
from claimbench.platform.files import replace_text
from claimbench.platform.yaml_file import load_yaml

SHA256_HEX = re.compile(r"[0-9a-f]{64}")  # what a hash field holds (fullmatch it)


def hash_secret(secret: str) -> str:
    """The sha256 hex of ``secret``, as the file stores it."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret(prefix: str) -> str:
    """A fresh secret: ``prefix`` and 32 random bytes, URL-safe."""
    return prefix + secrets.token_urlsafe(32)


def read_entries(path: Path, section: str, what: str) -> list[Any]:
    """The ``section`` list of the file (``what`` names it in errors); ValueError when the file
    cannot be read or does not hold a mapping with that list."""
    data = load_yaml(path, what)
    if not isinstance(data, dict) or not isinstance(data.get(section), list):
        raise ValueError(f"{path} must hold a mapping with an {section!r} list")
    return data[section]


def add_entry(
    path: Path,
    section: str,
    what: str,
    *,
    noun: str,
    name: str,
    prefix: str,
    build: Callable[[str], dict[str, Any]],
    check: Callable[[list[Any]], object],
) -> str:
    """Add the entry ``build(sha256 of a new secret)``, the ``noun`` named ``name``, to
    ``path`` (created 0600 when missing) and return the secret. ``check(entries)`` validates
    the old list and the new as a server start would (ValueError to refuse). ValueError when
    ``name`` exists already or the file is malformed; the file is then untouched. The read,
    the check and the write happen under the file's lock, so concurrent adds each land.

    The path is resolved first: two spellings of one file (a symlink to it) take the same lock,
    and the write replaces the file the link names, not the link."""
    path = Path(os.path.realpath(path))
    with locked(path):
        entries = read_entries(path, section, what) if path.exists() else []
        if path.exists():
            check(entries)  # a file the server would reject is not extended
        if any(isinstance(e, dict) and e.get("name") == name for e in entries):
            raise ValueError(f"{path}: {noun} {name!r} already exists")
        secret = new_secret(prefix)
        entries = [*entries, build(hash_secret(secret))]
        check(entries)
        # Only hashes, but the file still says who may act: 0600 when new.
        replace_text(path, yaml.safe_dump({section: entries}, sort_keys=False), new_mode=0o600)
    return secret
