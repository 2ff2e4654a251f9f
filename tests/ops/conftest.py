"""Every MCP test's audit key lives in a temp directory of its own (never the user's config),
outside any audit log's directory."""

from __future__ import annotations

import pytest

from claimbench.ops.audit_key import KEY_FILE_ENV_VAR


@pytest.fixture(autouse=True)
def _audit_key_file(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path_factory.mktemp("audit-key") / "audit.key"
    monkeypatch.setenv(KEY_FILE_ENV_VAR, str(path))
    return path
