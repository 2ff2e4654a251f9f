"""tenants.yaml and `claimbench tenants add`: keys printed once, stored only as sha256,
validated with one clear message."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from claimbench.cli.main import app
from claimbench.serving.tenants import KEY_PREFIX, TenantKeys, add_tenant

runner = CliRunner()


def test_add_prints_the_key_once_and_stores_only_its_hash(tmp_path: Path):
    file = tmp_path / "tenants.yaml"
    args = ["tenants", "add", "alice", "--file", str(file), "--priority", "1", "--weight", "2"]
    result = runner.invoke(app, [*args, "--max-queued-requests", "4"])
    assert result.exit_code == 0, result.output
    key = result.stdout.strip()
    assert key.startswith(KEY_PREFIX) and "\n" not in key
    text = file.read_text()
    assert key not in text
    assert hashlib.sha256(key.encode()).hexdigest() in text
    second = runner.invoke(app, ["tenants", "add", "bob", "--file", str(file)])
    assert second.exit_code == 0
    keys = TenantKeys.load(file)
    assert keys.tenant_for(key) == "alice"
    assert keys.tenant_for(second.stdout.strip()) == "bob"
    assert keys.tenant_for(key + "x") is None
    alice = keys.tenants[0]
    assert (alice.priority, alice.weight, alice.max_queued_requests) == (1, 2.0, 4)
    listing = runner.invoke(app, ["tenants", "list", "--file", str(file)])
    assert "alice" in listing.stdout and key not in listing.stdout


def test_add_refuses_a_duplicate_or_a_bad_setting_and_leaves_the_file(tmp_path: Path):
    file = tmp_path / "tenants.yaml"
    add_tenant(file, "alice", {})
    before = file.read_text()
    duplicate = runner.invoke(app, ["tenants", "add", "alice", "--file", str(file)])
    assert duplicate.exit_code == 2 and "already exists" in duplicate.output
    bad = runner.invoke(app, ["tenants", "add", "bob", "--file", str(file), "--weight", "-1"])
    assert bad.exit_code == 2 and "weight" in bad.output
    assert file.read_text() == before
    assert "Traceback" not in duplicate.output + bad.output


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("tenants: [", "not valid YAML at line 1"),
        ("\udcff", "is not UTF-8 text"),  # the byte 0xff
        ("- alice", "'tenants' list"),
        ("tenants: []", "no tenants"),
        ("tenants: [{name: a}]", "key_sha256"),
        ("tenants: [{name: a, key_sha256: [plaintext-key]}]", "not sha256 hex"),
        (f"tenants: [{{name: a, key_sha256: ['{'a' * 64}'], colour: red}}]", "unknown fields"),
        (f"tenants: [{{name: a, key_sha256: ['{'a' * 64}'], priority: high}}]", "priority"),
        (
            f"tenants: [{{name: a, key_sha256: ['{'a' * 64}']}}, "
            f"{{name: b, key_sha256: ['{'a' * 64}']}}]",
            "also",
        ),
    ],
)
def test_bad_tenants_files_are_one_clear_error(tmp_path: Path, text: str, words: str):
    file = tmp_path / "tenants.yaml"
    file.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(ValueError, match=words) as e:
        TenantKeys.load(file)
    assert str(file) in str(e.value)


def test_serve_with_a_bad_tenants_file_fails_before_loading_anything(tmp_path: Path):
    file = tmp_path / "tenants.yaml"
    file.write_text(yaml.safe_dump({"tenants": [{"name": "a"}]}))
    result = runner.invoke(app, ["serve", "--tenants", str(file)])
    assert result.exit_code == 2
    assert "key_sha256" in result.output and "Traceback" not in result.output
