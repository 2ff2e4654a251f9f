"""Text corpus: the Python standard library's source, split into training and held-out files.

Training reads the running interpreter's stdlib (sorted relative paths, so the order is
deterministic). About 5% of files, chosen by hashing their relative path, are held out.
The held-out split is shipped with the model assets (``heldout.txt.gz``), so evaluation
and workloads see the same text whichever Python version is installed.
"""

from __future__ import annotations

import gzip
import hashlib
import sysconfig
from pathlib import Path

import numpy as np

from claimbench.models.tokenizer import Tokenizer

HELDOUT_FILE = Path(__file__).parent.parent / "models" / "assets" / "heldout.txt.gz"
HELDOUT_PERCENT = 5
# ASCII record separator on its own line: never appears in stdlib source (checked when
# writing), so documents split back exactly.
DOC_SEPARATOR = "\n\x1e\n"


def stdlib_dir() -> Path:
    """The running interpreter's standard library directory."""
    return Path(sysconfig.get_paths()["stdlib"])


def is_heldout(relative_path: str) -> bool:
    """Deterministic split: the first 8 bytes of sha256(path) decide, ~HELDOUT_PERCENT%."""
    digest = hashlib.sha256(relative_path.encode()).digest()
    return int.from_bytes(digest[:8], "big") % 100 < HELDOUT_PERCENT


def stdlib_files(root: Path | None = None) -> list[tuple[str, Path]]:
    """(relative posix path, file) for every stdlib ``*.py`` outside site-packages, sorted."""
    root = stdlib_dir() if root is None else root
    files = [
        (f.relative_to(root).as_posix(), f)
        for f in root.rglob("*.py")
        if "site-packages" not in f.relative_to(root).parts and f.is_file()
    ]
    return sorted(files)


def read_source(file: Path) -> str | None:
    """A source file's text, or None when it is not valid UTF-8 (some test fixtures)."""
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None
    return None if DOC_SEPARATOR.strip("\n") in text else text


def training_files(root: Path | None = None) -> list[Path]:
    """The training split of the stdlib, in deterministic order."""
    return [f for rel, f in stdlib_files(root) if not is_heldout(rel)]


def heldout_files(root: Path | None = None) -> list[Path]:
    """The held-out split of the stdlib (what ``heldout.txt.gz`` was written from)."""
    return [f for rel, f in stdlib_files(root) if is_heldout(rel)]


def write_heldout(texts: list[str], path: Path, max_bytes: int) -> list[str]:
    """Gzip ``texts`` joined by DOC_SEPARATOR to ``path``, keeping a prefix within max_bytes.

    Documents are kept in order until the compressed size would pass ``max_bytes``;
    returns the documents kept.
    """
    kept: list[str] = []
    for text in texts:
        candidate = DOC_SEPARATOR.join([*kept, text]).encode()
        if len(gzip.compress(candidate, compresslevel=9, mtime=0)) > max_bytes:
            break
        kept.append(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(DOC_SEPARATOR.join(kept).encode(), compresslevel=9, mtime=0))
    return kept


def heldout_texts(path: Path = HELDOUT_FILE) -> list[str]:
    """The shipped held-out documents (one per stdlib source file)."""
    if not path.is_file():
        raise FileNotFoundError(f"held-out corpus {path} is missing")
    return gzip.decompress(path.read_bytes()).decode().split(DOC_SEPARATOR)


def token_stream(tokenizer: Tokenizer, texts: list[str]) -> np.ndarray:
    """i32[total]: every document as [BOS] + tokens + [EOS], concatenated in order.

    Training samples windows from this stream of the training split, evaluation from
    the held-out one, so both see document boundaries the same way.
    """
    bos = [] if tokenizer.bos_id is None else [tokenizer.bos_id]
    eos = [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    parts = [np.asarray(bos + ids + eos, np.int32) for ids in tokenizer.encode_batch(texts)]
    return np.concatenate(parts)


def heldout_token_windows(
    tokenizer: Tokenizer, n: int, length: int, seed: int, path: Path = HELDOUT_FILE
) -> np.ndarray:
    """i32[n, length]: windows at distinct seeded offsets of the held-out token stream."""
    stream = token_stream(tokenizer, heldout_texts(path))
    num_windows = len(stream) // length
    if n > num_windows:
        raise ValueError(f"asked for {n} windows of {length} tokens; held-out has {num_windows}")
    starts = np.random.default_rng(seed).choice(num_windows, size=n, replace=False) * length
    return np.stack([stream[s : s + length] for s in np.sort(starts)])


def heldout_prompts(
    tokenizer: Tokenizer, n: int, min_len: int, max_len: int, seed: int, path: Path = HELDOUT_FILE
) -> list[list[int]]:
    """n prompts of BOS + held-out tokens, lengths uniform in [min_len, max_len] (BOS included).

    Each prompt starts at the beginning of a line of a seeded random document, so it reads
    like the start of real code.
    """
    if not 2 <= min_len <= max_len:
        raise ValueError(f"need 2 <= min_len <= max_len, got {min_len}, {max_len}")
    rng = np.random.default_rng(seed)
    docs = tokenizer.encode_batch(heldout_texts(path))
    # Byte-level BPE folds newlines into tokens like "\n    ": a line starts after any of them.
    unique_ids = sorted({t for ids in docs for t in ids})
    newline_ids = {t for t in unique_ids if "\n" in tokenizer.decode([t])}
    bos = [] if tokenizer.bos_id is None else [tokenizer.bos_id]
    prompts = []
    for _ in range(n):
        body = int(rng.integers(min_len, max_len + 1)) - len(bos)
        long_enough = [ids for ids in docs if len(ids) >= body]
        if not long_enough:
            raise ValueError(f"no held-out document has {body} tokens")
        ids = long_enough[int(rng.integers(len(long_enough)))]
        starts = [0] + [i + 1 for i, t in enumerate(ids[: len(ids) - body]) if t in newline_ids]
        start = starts[int(rng.integers(len(starts)))]
        prompts.append(bos + ids[start : start + body])
    return prompts
