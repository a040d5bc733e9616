"""README.md runs as written: its Python blocks from a folder holding the bundled sample, its commands on a CSV."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pandas as pd

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


def shell_commands(text: str) -> list[list[str]]:
    """The `tsformer ...` command lines of README's code blocks (comments after `#` dropped)."""
    commands = []
    for block in re.findall(r"```\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            if line.startswith("tsformer "):
                commands.append(shlex.split(line.split("  #")[0])[1:])
    return commands


def test_the_readmes_commands_run_as_written(tmp_path, monkeypatch):
    from helpers import hourly_series
    from typer.testing import CliRunner

    from tsformer.cli import app

    commands = shell_commands((REPO / "README.md").read_text())
    assert [c[0] for c in commands] == ["train", "evaluate", "predict", "check"]
    monkeypatch.chdir(tmp_path)
    hourly_series(400).rename(columns={"load": "price"})[["date", "price"]].to_csv("prices.csv", index=False)
    for argv in commands:
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 0, f"tsformer {shlex.join(argv)}: {result.output}"
    forecast = pd.read_csv("forecast.csv")
    assert len(forecast) == 24 and {"date", "price", "price_lower_80", "forecaster"} <= set(forecast.columns)
