"""replace_text: all or nothing, the mode kept, nothing left behind."""

from __future__ import annotations

import os
import stat

import pytest

from claimbench.platform.files import replace_file, replace_text


def test_a_new_file_gets_new_mode_and_an_old_one_keeps_its_own(tmp_path):
    path = tmp_path / "a.txt"
    replace_text(path, "one", new_mode=0o600)
    assert path.read_text() == "one"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    os.chmod(path, 0o640)
    replace_text(path, "two")
    assert path.read_text() == "two"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_a_failed_write_leaves_the_old_text_and_no_temp_file(tmp_path):
    path = tmp_path / "a.txt"
    replace_text(path, "kept")
    with pytest.raises(UnicodeEncodeError):
        replace_text(path, "half written \ud800 never")  # a lone surrogate fails mid-write
    assert path.read_text() == "kept"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_a_symlink_at_a_predictable_temp_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    for name in (".a.txt.tmp", "a.txt.tmp"):
        (tmp_path / name).symlink_to(victim)
    replace_text(tmp_path / "a.txt", "new")
    assert victim.read_text() == "untouched"
    assert (tmp_path / "a.txt").read_text() == "new"


def test_a_writer_that_fails_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"kept")

    def half_then_fail(tmp):
        tmp.write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_file(path, half_then_fail)
    assert path.read_bytes() == b"kept"
    assert [p.name for p in tmp_path.iterdir()] == ["a.bin"]
