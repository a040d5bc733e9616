"""Shared fixtures: small CSVs in tmp_path and an isolated environment."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import make_frame, write_csv


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """Tests never touch the user's home or data dir, and plots never need a display."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TSFORMER_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def tiny_csv(tmp_path) -> Path:
    return write_csv(tmp_path / "tiny.csv", make_frame())
