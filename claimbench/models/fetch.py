"""Fetch a Hugging Face checkpoint at a pinned commit into a directory the engine loads.

    <out>/config.json, *.safetensors, tokenizer.json, ...   the files the loader reads
    <out>/fetch.json                                        repo, revision, source, sha256 per file

The files land in ``<out>.partial`` first (a download interrupted there resumes on the next
fetch), are checked by the loader's own checks and hashed, and the directory is renamed into
place: ``<out>`` exists only complete. Fetching again verifies every recorded sha256 instead of
downloading, so a changed or truncated file is found, not served.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from claimbench.models.provenance import ModelDirError, check_model_dir, file_sha256

FETCH_FILE = "fetch.json"
PARTIAL_SUFFIX = ".partial"
# What the engine's loader reads (config, generation config, weights, tokenizer, a chat template
# in chat_template.jinja) and the licence that comes with it.
ALLOW_PATTERNS = ("*.json", "*.jinja", "*.safetensors", "*.txt", "LICENSE*", "*.md")
DEFAULT_CACHE = Path.home() / ".cache" / "claimbench" / "models"
_REVISION = re.compile(r"^[0-9a-f]{40}$")
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

# (repo, revision, destination) -> where the files came from; writes them under destination.
Downloader = Callable[[str, str, Path], str]


class FetchError(ValueError):
    """A fetch that cannot be done or a fetched directory that does not verify; one line."""


@dataclass(frozen=True)
class Fetched:
    """A verified checkpoint directory and what its fetch.json records."""

    path: Path
    record: dict[str, Any]
    downloaded: bool  # False: it was already there and every sha256 matched


def default_dir(repo: str, revision: str) -> Path:
    """Where a fetch goes unless told: one directory per repo and commit."""
    return DEFAULT_CACHE / repo.replace("/", "--") / revision


def hub_download(repo: str, revision: str, dest: Path) -> str:
    """Download ``repo`` at ``revision`` into ``dest`` with huggingface_hub (the fetch extra)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise FetchError(
            "huggingface_hub is not installed: pip install 'claimbench[fetch]'"
        ) from None
    snapshot_download(
        repo_id=repo, revision=revision, local_dir=dest, allow_patterns=list(ALLOW_PATTERNS)
    )
    return "https://huggingface.co"


def copy_from(source: Path) -> Downloader:
    """A downloader that copies a local HF-format directory (an offline VM, a mirror, tests)."""

    def copy(repo: str, revision: str, dest: Path) -> str:
        if not source.is_dir():
            raise FetchError(f"--from-dir {source} is not a directory")
        shutil.copytree(source, dest, dirs_exist_ok=True)
        return f"local directory {source.resolve()}"

    return copy


def _files(path: Path) -> list[Path]:
    """The checkpoint's files: every regular file but fetch.json and the hub's hidden cache."""
    return sorted(
        f
        for f in path.rglob("*")
        if f.is_file()
        and f.name != FETCH_FILE
        and not any(part.startswith(".") for part in f.relative_to(path).parts)
    )


def _hash_files(path: Path) -> dict[str, dict[str, Any]]:
    return {
        str(f.relative_to(path)): {"sha256": file_sha256(f), "bytes": f.stat().st_size}
        for f in _files(path)
    }


def read_record(path: Path) -> dict[str, Any]:
    """fetch.json of ``path``, unverified."""
    try:
        record = json.loads((path / FETCH_FILE).read_text())
        if not isinstance(record["files"], dict):
            raise TypeError
    except FileNotFoundError:
        raise FetchError(f"{path} exists but has no {FETCH_FILE}: not a fetched model") from None
    except (json.JSONDecodeError, KeyError, TypeError):
        raise FetchError(f"{path / FETCH_FILE} is not a valid fetch record") from None
    return record


def verify(path: Path) -> dict[str, Any]:
    """fetch.json of ``path`` after checking every file it lists against its sha256."""
    record = read_record(path)
    for name, expected in record["files"].items():
        file = path / name
        if not file.is_file():
            raise FetchError(f"{path}: {name} is missing (recorded in {FETCH_FILE})")
        if file_sha256(file) != expected["sha256"]:
            raise FetchError(f"{path}: {name} does not match its recorded sha256")
    return record


def fetch_model(
    repo: str, revision: str, out: Path, *, download: Downloader = hub_download
) -> Fetched:
    """Fetch ``repo`` at commit ``revision`` into ``out``; FetchError (one line) on any failure.

    ``out`` already holding this repo and revision is verified and kept; holding anything else
    is an error, never overwritten.
    """
    if not _REPO.match(repo):
        raise FetchError(f"repo {repo!r} is not of the form owner/name")
    if not _REVISION.match(revision):
        raise FetchError(
            f"revision {revision!r} is not a 40-hex commit sha: a branch or tag can move"
        )
    if out.exists():
        record = read_record(out)
        if (record.get("repo"), record.get("revision")) != (repo, revision):
            raise FetchError(
                f"{out} holds {record.get('repo')}@{record.get('revision')}, not {repo}@{revision}"
            )
        return Fetched(out, verify(out), downloaded=False)
    partial = out.with_name(out.name + PARTIAL_SUFFIX)
    partial.mkdir(parents=True, exist_ok=True)
    source = download(repo, revision, partial)
    try:
        check_model_dir(partial)
    except ModelDirError as err:
        shutil.rmtree(partial, ignore_errors=True)
        raise FetchError(f"{repo}@{revision[:12]} is not a model the engine loads: {err}") from None
    record = {
        "repo": repo,
        "revision": revision,
        "source": source,
        "fetched_at": datetime.now(UTC).isoformat(),
        "huggingface_hub": _version("huggingface_hub"),
        "files": _hash_files(partial),
    }
    (partial / FETCH_FILE).write_text(json.dumps(record, indent=2) + "\n")
    os.rename(partial, out)
    return Fetched(out, record, downloaded=True)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
