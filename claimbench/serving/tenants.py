"""API keys -> tenants: tenants.yaml, with keys stored only as sha256 hashes.

    tenants:
      - name: alice                 # the engine's tenant id
        key_sha256: [9f86d0...]     # sha256 hex of each API key (a key is never stored)
        priority: 0                 # every engine/sched/tenants.py Tenant field may follow:
        weight: 2.0                 # weight, priority, guaranteed_pages, burst_pages,
        max_queued_requests: 8      # max_queued_requests, max_queued_tokens, token_rate,
                                    # token_burst, ttft_slo_s, tpot_slo_s

A request's ``Authorization: Bearer <key>`` is hashed and looked up; a leaked file gives
away no key. The file's format and its locked `add` are platform/hashed_key_file.py's, shared
with the agents of `claimbench mcp`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from claimbench.engine.config_tenants import Tenant
from claimbench.platform.hashed_key_file import (
    SHA256_HEX,
    add_entry,
    hash_secret,
    new_secret,
    read_entries,
)

KEY_PREFIX = "cb-"
SETTINGS = tuple(f.name for f in dataclasses.fields(Tenant) if f.name != "id")


hash_key = hash_secret


def new_key() -> str:
    """A fresh API key: the prefix and 32 random bytes, URL-safe."""
    return new_secret(KEY_PREFIX)


class TenantKeys:
    """The tenants of a tenants file and the hashes of their keys."""

    def __init__(self, tenants: list[Tenant], key_hashes: dict[str, str]) -> None:
        self.tenants = tenants  # in file order
        self.key_hashes = key_hashes  # sha256 hex -> tenant id

    def tenant_for(self, key: str) -> str | None:
        """The tenant whose key this is, or None."""
        return self.key_hashes.get(hash_key(key))

    def bucket_size(self, tenant_id: str) -> float | None:
        """The size of ``tenant_id``'s token bucket (token_burst), None without one."""
        tenant = next((t for t in self.tenants if t.id == tenant_id), None)
        if tenant is None or tenant.token_rate is None:
            return None
        return tenant.bucket_size

    @classmethod
    def load(cls, path: Path) -> TenantKeys:
        """Read and validate a tenants file; ValueError naming the file and the problem."""
        return cls.from_entries(path, read_entries(path, "tenants", "tenants file"))

    @classmethod
    def from_entries(cls, path: Path, entries: list) -> TenantKeys:
        """Validate a tenants file's entries (``path`` names it in errors)."""
        tenants, key_hashes = [], {}
        for entry in entries:
            tenant, hashes = _parse_entry(path, entry)
            if any(t.id == tenant.id for t in tenants):
                raise ValueError(f"{path}: tenant {tenant.id!r} appears twice")
            for digest in hashes:
                if digest in key_hashes:
                    raise ValueError(
                        f"{path}: a key of {tenant.id!r} is also {key_hashes[digest]!r}'s"
                    )
                key_hashes[digest] = tenant.id
            tenants.append(tenant)
        if not tenants:
            raise ValueError(f"{path}: no tenants")
        return cls(tenants, key_hashes)


def add_tenant(path: Path, name: str, settings: dict[str, object]) -> str:
    """Add tenant ``name`` with a new key to ``path`` (created if missing); returns the key.

    ValueError if the tenant exists, a setting is invalid or the file is malformed; the file is
    then untouched. Safe to call from several processes at once."""

    def build(digest: str) -> dict[str, object]:
        entry = {"name": name, "key_sha256": [digest]}
        return entry | {k: v for k, v in settings.items() if v is not None}

    return add_entry(
        path,
        "tenants",
        "tenants file",
        noun="tenant",
        name=name,
        prefix=KEY_PREFIX,
        build=build,
        check=lambda entries: TenantKeys.from_entries(path, entries),
    )


def _parse_entry(path: Path, entry: object) -> tuple[Tenant, list[str]]:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise ValueError(f"{path}: every tenant needs a 'name', got {entry!r}")
    name = entry["name"]
    if name.startswith("_"):
        # Names starting with "_" are the server's own (the health probe's tenant).
        raise ValueError(f"{path}: tenant names may not start with '_', got {name!r}")
    unknown = sorted(set(entry) - {"name", "key_sha256", *SETTINGS})
    if unknown:
        raise ValueError(f"{path}: tenant {name!r} has unknown fields {unknown}; known: {SETTINGS}")
    hashes = entry.get("key_sha256")
    if isinstance(hashes, str):
        hashes = [hashes]
    if not isinstance(hashes, list) or not hashes:
        raise ValueError(f"{path}: tenant {name!r} needs key_sha256 (a list of sha256 hex)")
    for digest in hashes:
        if not isinstance(digest, str) or not SHA256_HEX.fullmatch(digest):
            raise ValueError(f"{path}: tenant {name!r} key_sha256 {digest!r} is not sha256 hex")
    try:
        tenant = Tenant(name, **{k: entry[k] for k in SETTINGS if k in entry})
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from e
    return tenant, hashes
