"""The tenants file is rewritten through a fresh temp name in its own directory: a symlink
planted at the old fixed name (``tenants.yaml.tmp``) is not followed, the file keeps its
mode (0600 stays 0600), and no temp file is left behind."""

from __future__ import annotations

import os
import stat

import pytest

from claimbench.platform.file_lock import lock_path
from claimbench.serving.tenants import TenantKeys, add_tenant


@pytest.mark.slow
def test_a_planted_symlink_is_not_followed_and_the_mode_is_kept(tmp_path):
    path = tmp_path / "tenants.yaml"
    add_tenant(path, "alice", {})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # a new file names keys: owner only
    os.chmod(path, 0o640)
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    (tmp_path / "tenants.yaml.tmp").symlink_to(victim)
    add_tenant(path, "bob", {})
    assert victim.read_text() == "untouched"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [t.id for t in TenantKeys.load(path).tenants] == ["alice", "bob"]
    kept = {"tenants.yaml", "victim.txt", lock_path(path).name}  # the lock file stays
    leftovers = {p.name for p in tmp_path.iterdir()} - kept
    assert leftovers == {"tenants.yaml.tmp"}  # only the planted link; no temp file of ours
