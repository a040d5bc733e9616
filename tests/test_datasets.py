"""Where datasets are found (--data-dir, $TSFORMER_DATA_DIR, the cache) and fetching with a checksum, offline."""

from __future__ import annotations

import dataclasses
import hashlib
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tsformer.datasets as datasets
from tsformer.cli import app
from tsformer.datasets import data_dirs, fetch, resolve_data_path
from tsformer.errors import DataError

CONTENT = b"date,OT\n2024-01-01 00:00:00,1.0\n2024-01-01 01:00:00,2.0\n"


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any attempt to open a network connection fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("a test tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.delenv("TSFORMER_DATA_DIR", raising=False)


def _register(monkeypatch, source: Path, sha256: str) -> None:
    """Point the etth1 entry at a local file:// URL with the given checksum."""
    entry = dataclasses.replace(datasets.REGISTRY["etth1"], url=source.as_uri(), sha256=sha256)
    monkeypatch.setitem(datasets.REGISTRY, "etth1", entry)


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "upstream" / "ETTh1.csv"
    path.parent.mkdir()
    path.write_bytes(CONTENT)
    return path


def test_fetch_downloads_and_verifies_a_good_file(source, tmp_path, monkeypatch):
    _register(monkeypatch, source, hashlib.sha256(CONTENT).hexdigest())
    target = fetch("etth1")
    assert target == tmp_path / "cache" / "ETTh1.csv"  # the cache: $TSFORMER_CACHE_DIR (conftest)
    assert target.read_bytes() == CONTENT
    assert sorted(p.name for p in target.parent.iterdir()) == ["ETTh1.csv"]  # no temp file left

    source.unlink()  # a valid file already in place is not downloaded again
    assert fetch("etth1") == target


def test_fetch_refuses_a_wrong_checksum_and_keeps_nothing(source, tmp_path, monkeypatch):
    _register(monkeypatch, source, "0" * 64)
    dest = tmp_path / "dest"
    with pytest.raises(DataError, match=f"sha256 {hashlib.sha256(CONTENT).hexdigest()}, expected 0000"):
        fetch("etth1", dest)
    assert dest.is_dir() and list(dest.iterdir()) == []  # neither ETTh1.csv nor a temp file


def test_fetch_replaces_a_corrupt_file_only_with_a_verified_one(source, tmp_path, monkeypatch):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "ETTh1.csv").write_bytes(b"truncated")
    _register(monkeypatch, source, "0" * 64)
    with pytest.raises(DataError, match="expected 0000"):
        fetch("etth1", dest)
    assert (dest / "ETTh1.csv").read_bytes() == b"truncated" and len(list(dest.iterdir())) == 1
    _register(monkeypatch, source, hashlib.sha256(CONTENT).hexdigest())
    assert fetch("etth1", dest).read_bytes() == CONTENT


def test_fetch_reports_an_unreachable_source_and_keeps_nothing(tmp_path, monkeypatch):
    _register(monkeypatch, tmp_path / "nowhere" / "ETTh1.csv", "0" * 64)
    with pytest.raises(DataError, match="cannot download etth1 from file://.*copy ETTh1.csv into"):
        fetch("etth1", tmp_path / "dest")
    assert list((tmp_path / "dest").iterdir()) == []


def test_fetch_refuses_unknown_names_and_entries_without_a_url(tmp_path):
    with pytest.raises(DataError, match="unknown dataset 'nope'; known datasets: etth1, illness"):
        fetch("nope")
    with pytest.raises(DataError, match="illness has no stable public download address"):
        fetch("illness", tmp_path)


def test_data_dirs_order_is_flag_then_environment_then_cache(tmp_path, monkeypatch):
    assert data_dirs() == [tmp_path / "cache"]
    monkeypatch.setenv("TSFORMER_DATA_DIR", str(tmp_path / "env"))
    assert data_dirs(tmp_path / "flag") == [tmp_path / "flag", tmp_path / "env", tmp_path / "cache"]
    assert all("shared" not in str(d) for d in data_dirs())  # nothing relative to a checkout


def test_resolve_data_path_takes_the_first_folder_holding_the_file(tmp_path, monkeypatch):
    for folder in ("flag", "env", "cache"):
        (tmp_path / folder).mkdir()
    (tmp_path / "cache" / "ETTh1.csv").write_text("cache")
    monkeypatch.setenv("TSFORMER_DATA_DIR", str(tmp_path / "env"))
    monkeypatch.chdir(tmp_path / "flag")  # not found in the current folder either
    assert resolve_data_path("ETTh1.csv", tmp_path / "flag") == tmp_path / "cache" / "ETTh1.csv"
    (tmp_path / "env" / "ETTh1.csv").write_text("env")
    assert resolve_data_path("ETTh1.csv", tmp_path / "flag") == tmp_path / "env" / "ETTh1.csv"
    (tmp_path / "flag" / "ETTh1.csv").write_text("flag")
    monkeypatch.chdir(tmp_path)
    assert resolve_data_path("ETTh1.csv", tmp_path / "flag") == tmp_path / "flag" / "ETTh1.csv"
    assert resolve_data_path("missing.csv", tmp_path / "flag") == Path("missing.csv")  # reported as given


def test_datasets_list_shows_where_each_dataset_is_found(tmp_path, monkeypatch):
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "ETTh1.csv").write_text("x")
    monkeypatch.setenv("TSFORMER_DATA_DIR", str(tmp_path / "env"))
    result = CliRunner().invoke(app, ["datasets", "list"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["etth1", "ETTh1.csv", str(tmp_path / "env" / "ETTh1.csv")]
    assert lines[2].split()[:4] == ["illness", "national_illness.csv", "not", "found"]


def test_datasets_fetch_command(source, tmp_path, monkeypatch):
    _register(monkeypatch, source, hashlib.sha256(CONTENT).hexdigest())
    result = CliRunner().invoke(app, ["datasets", "fetch", "etth1", "--dest", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    assert result.output == f"etth1: {tmp_path / 'd' / 'ETTh1.csv'}\n"
    _register(monkeypatch, source, "0" * 64)
    result = CliRunner().invoke(app, ["datasets", "fetch", "etth1", "--dest", str(tmp_path / "e")])
    assert result.exit_code == 2
    assert result.output.startswith("Error: downloaded ETTh1.csv has sha256") and len(result.output.splitlines()) == 1
