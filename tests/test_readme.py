"""README.md's Python blocks run as written, in order, from a folder holding the bundled sample."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_readmes_python_blocks_run_as_written(tmp_path, monkeypatch, capsys):
    blocks = python_blocks((REPO / "README.md").read_text())
    assert len(blocks) >= 2, "README.md has a Python section with a worked example"
    (tmp_path / "data").mkdir()
    shutil.copy(REPO / "data" / "sample.csv", tmp_path / "data" / "sample.csv")
    monkeypatch.chdir(tmp_path)  # its relative paths (data/sample.csv, runs/sample) as from a clone
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 - the point of the test
    assert (tmp_path / "runs" / "sample" / "model.pt").is_file()
    printed = capsys.readouterr().out
    assert "OT_lower_80" in printed and "seasonal_naive" in printed and "temperature" not in printed
    assert namespace["panel"].layout.static_categorical == (("kind", ("demand", "supply", "temperature")),)
