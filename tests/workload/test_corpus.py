"""The stdlib corpus: deterministic split, the shipped held-out file, windows and prompts."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from claimbench.models.tokenizer import Tokenizer
from claimbench.training.train import train_tokenizer
from claimbench.workload.corpus import (
    DOC_SEPARATOR,
    HELDOUT_FILE,
    heldout_files,
    heldout_prompts,
    heldout_texts,
    heldout_token_windows,
    is_heldout,
    read_source,
    stdlib_files,
    training_files,
    write_heldout,
)

DOCS = [f"def f{i}():\n    return {i} * {i}\n\nclass C{i}:\n    pass\n" * (3 + i) for i in range(8)]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_tokenizer(DOCS, vocab_size=320)


@pytest.fixture
def heldout(tmp_path: Path) -> Path:
    path = tmp_path / "heldout.txt.gz"
    write_heldout(DOCS, path, max_bytes=10**6)
    return path


def test_split_is_deterministic_and_about_five_percent() -> None:
    names = [f"pkg/module_{i}.py" for i in range(4000)]
    fraction = np.mean([is_heldout(n) for n in names])
    assert 0.04 < fraction < 0.06
    assert [is_heldout(n) for n in names] == [is_heldout(n) for n in names]


@pytest.mark.slow
def test_stdlib_split_partitions_sorted_files() -> None:
    files = stdlib_files()
    assert files == sorted(files) and len(files) > 100
    assert not any("site-packages" in rel for rel, _ in files)
    train, held = training_files(), heldout_files()
    assert len(train) + len(held) == len(files)
    assert not set(train) & set(held)


def test_write_and_read_back(heldout: Path) -> None:
    assert heldout_texts(heldout) == DOCS


def test_write_keeps_a_prefix_within_budget(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    docs = ["".join(rng.choice(list("abcdefghij0123456789"), 2000)) for _ in range(5)]
    path = tmp_path / "h.txt.gz"
    kept = write_heldout(docs, path, max_bytes=3000)
    # ~1.1 kB compressed each: a prefix that fits, and the next document would not.
    assert 1 <= len(kept) < len(docs) and kept == docs[: len(kept)]
    assert path.stat().st_size <= 3000
    over = gzip.compress(DOC_SEPARATOR.join(docs[: len(kept) + 1]).encode(), 9, mtime=0)
    assert len(over) > 3000
    assert heldout_texts(path) == kept


def test_read_source_skips_separator_and_bad_utf8(tmp_path: Path) -> None:
    good, sep, bad = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    good.write_text("x = 1\n")
    sep.write_text("x = 1" + DOC_SEPARATOR)
    bad.write_bytes(b"x = '\xff'\n")
    assert read_source(good) == "x = 1\n"
    assert read_source(sep) is None and read_source(bad) is None


def test_token_windows(tokenizer: Tokenizer, heldout: Path) -> None:
    windows = heldout_token_windows(tokenizer, 6, 16, seed=3, path=heldout)
    assert windows.shape == (6, 16) and windows.dtype == np.int32
    again = heldout_token_windows(tokenizer, 6, 16, seed=3, path=heldout)
    np.testing.assert_array_equal(windows, again)
    other = heldout_token_windows(tokenizer, 6, 16, seed=4, path=heldout)
    assert not np.array_equal(windows, other)
    # Windows are distinct slices of the stream.
    assert len({w.tobytes() for w in windows}) == 6


def test_too_many_windows_raises(tokenizer: Tokenizer, heldout: Path) -> None:
    with pytest.raises(ValueError, match="asked for 100000 windows of 16 tokens"):
        heldout_token_windows(tokenizer, 100000, 16, seed=0, path=heldout)


def test_prompts(tokenizer: Tokenizer, heldout: Path) -> None:
    prompts = heldout_prompts(tokenizer, 20, 5, 12, seed=0, path=heldout)
    assert len(prompts) == 20
    assert all(5 <= len(p) <= 12 and p[0] == tokenizer.bos_id for p in prompts)
    assert len({len(p) for p in prompts}) > 1
    text = "".join(DOCS)
    assert all(tokenizer.decode(p) in text for p in prompts)
    assert prompts == heldout_prompts(tokenizer, 20, 5, 12, seed=0, path=heldout)


def test_prompt_length_validation(tokenizer: Tokenizer, heldout: Path) -> None:
    with pytest.raises(ValueError, match="need 2 <= min_len <= max_len, got 9, 4"):
        heldout_prompts(tokenizer, 1, 9, 4, seed=0, path=heldout)
    with pytest.raises(ValueError, match="no held-out document has"):
        heldout_prompts(tokenizer, 1, 5000, 5000, seed=0, path=heldout)


def test_shipped_heldout_within_budget() -> None:
    assert HELDOUT_FILE.stat().st_size <= 2_000_000
    texts = heldout_texts()
    # One document per held-out stdlib file (empty __init__.py files included).
    assert len(texts) > 20 and sum(map(len, texts)) > 100_000
    assert any("def " in t for t in texts)
