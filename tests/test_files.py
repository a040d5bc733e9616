"""Atomic writes: the whole file or the old one, never a temp file left behind, errors naming the user's path."""

from __future__ import annotations

import errno
import os

import pytest

import tsformer.files as files_module
from tsformer.errors import ConfigError
from tsformer.files import atomic_write, atomic_write_text, check_output_path


def _disk_full(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "out.csv"
    path.write_text("old")
    atomic_write_text(path, "new")
    assert path.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_a_full_disk_keeps_the_old_file_and_names_the_users_path(tmp_path, monkeypatch):
    path = tmp_path / "out.csv"
    path.write_text("old")
    monkeypatch.setattr(files_module.os, "fsync", _disk_full)
    with pytest.raises(OSError) as caught:
        atomic_write_text(path, "new")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(path)
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_a_failing_writer_leaves_nothing(tmp_path):
    def half_then_fail(handle):
        handle.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "out.csv", half_then_fail)
    assert list(tmp_path.iterdir()) == []


def test_a_symlink_is_written_through(tmp_path):
    target, link = tmp_path / "target.csv", tmp_path / "link.csv"
    target.write_text("old")
    link.symlink_to(target)
    atomic_write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_output_paths_are_checked_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match=r"--out .* is a folder; give a file path"):
        check_output_path(tmp_path, "--out")
    with pytest.raises(ConfigError, match="folder .*missing does not exist"):
        check_output_path(tmp_path / "missing" / "f.csv", "--plot")
    check_output_path(tmp_path / "f.csv", "--out")


def test_an_error_that_is_not_the_file_systems_passes_through(tmp_path):
    def network_down(handle):
        raise TimeoutError("timed out")  # an OSError without an errno

    with pytest.raises(TimeoutError, match="timed out"):
        atomic_write(tmp_path / "download.csv", network_down)
    assert list(tmp_path.iterdir()) == []
