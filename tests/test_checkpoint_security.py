"""Untrusted checkpoints: loading never runs code from the file; other format versions are named and refused."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tsformer.checkpoint import FORMAT_VERSION, READS_FORMATS, save_predictor
from tsformer.cli import app
from tsformer.config import load_config
from tsformer.data import Scaler, SplitBorders
from tsformer.errors import CheckpointError
from tsformer.layout import Layout
from tsformer.model import Forecaster
from tsformer.predictor import Predictor, load_predictor
from tsformer.runfolder import MODEL_FILE


class RunsCommand:
    """Unpickling this runs a shell command (the classic pickle exploit)."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def _valid_checkpoint() -> Predictor:
    cfg = load_config(None, ["model.context_len=16", "model.horizon=4", "model.d_model=8", "model.n_heads=2",
                             "model.d_ff=16", "model.patch_len=4", "model.n_layers=1", "model.cycle=0",
                             "data.calendar=false", "train.loss=mse"])  # fmt: skip
    layout = Layout(("load", "temp"))
    return Predictor(
        config=cfg, layout=layout, time_col="date", freq="h", id_cols=(), series=((),),
        scaler=Scaler(mean=np.zeros((1, 2), np.float32), std=np.ones((1, 2), np.float32)),
        borders=SplitBorders.from_list([[70], [80], [100]]), model=Forecaster(cfg.model, layout, cfg.train.loss),
        data_fingerprint={"rows": 100, "first": "2024-01-01 00:00:00", "last": "2024-01-05 03:00:00", "sha256": "0"},
    )  # fmt: skip


def _payload(tmp_path: Path) -> dict:
    """The dict a real model.pt holds."""
    path = tmp_path / "genuine.pt"
    save_predictor(_valid_checkpoint(), path)
    return torch.load(path, weights_only=True)


def _write_torch(tmp_path: Path, marker: Path) -> Path:
    """A torch.save zip whose payload would run `touch marker`, next to genuine weights and metadata."""
    payload = _payload(tmp_path)
    payload["scaler"] = RunsCommand(f"touch {marker}")
    run = tmp_path / "torch_run"
    run.mkdir()
    torch.save(payload, run / MODEL_FILE)
    return run


def _write_pickle(tmp_path: Path, marker: Path) -> Path:
    """A bare pickle file (torch's legacy format) that would run `touch marker`."""
    run = tmp_path / "pickle_run"
    run.mkdir()
    (run / MODEL_FILE).write_bytes(pickle.dumps(RunsCommand(f"touch {marker}")))
    return run


WRITERS = {"torch.save": _write_torch, "pickle": _write_pickle}


@pytest.fixture
def csv_path(tmp_path: Path) -> Path:
    path = tmp_path / "series.csv"
    rows = ["date,load,temp"] + [f"2024-01-01 {h:02d}:00:00,{h},{h / 2}" for h in range(24)]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("writer", WRITERS)
def test_crafted_checkpoint_really_runs_code_when_loaded_unsafely(tmp_path, writer):
    """Guards the other tests: the file is a working exploit for an unsafe loader."""
    marker = tmp_path / "pwned"
    run = WRITERS[writer](tmp_path, marker)
    with (run / MODEL_FILE).open("rb") as handle:
        if writer == "pickle":
            pickle.load(handle)  # noqa: S301 - the point of the test
        else:
            torch.load(handle, weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("command", ["evaluate", "predict", "check"])
def test_commands_refuse_a_checkpoint_that_would_run_code(tmp_path, csv_path, writer, command):
    marker = tmp_path / "pwned"
    run = WRITERS[writer](tmp_path, marker)
    argv = [command, str(run)] + ([str(csv_path)] if command == "predict" else [])
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: {run / MODEL_FILE} is not a loadable tsformer checkpoint"), result.output
    assert "Traceback" not in result.output
    assert not marker.exists(), "loading the checkpoint ran code from it"


def test_load_predictor_refuses_code_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    run = _write_torch(tmp_path, marker)
    with pytest.raises(CheckpointError, match="holding code") as caught:
        load_predictor(run / MODEL_FILE)
    assert "system" in str(caught.value)  # names what it refused
    assert "weights_only" not in str(caught.value)  # and does not advise the unsafe retry
    assert not marker.exists()


@pytest.mark.parametrize("version", [READS_FORMATS[0] - 1, FORMAT_VERSION + 1])
def test_other_format_versions_are_refused_naming_both(tmp_path, version):
    payload = _payload(tmp_path)
    payload["format_version"] = version
    run = tmp_path / "run"
    run.mkdir()
    torch.save(payload, run / MODEL_FILE)
    expected = f"has checkpoint format {version} but this tsformer"
    with pytest.raises(CheckpointError, match=expected) as caught:
        load_predictor(run / MODEL_FILE)
    assert "reads format 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 or 17" in str(caught.value)
    result = CliRunner().invoke(app, ["evaluate", str(run)])
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: {run / MODEL_FILE} {expected}")


def test_genuine_checkpoint_round_trips(tmp_path):
    ckpt = _valid_checkpoint()
    save_predictor(ckpt, tmp_path / MODEL_FILE)
    loaded = load_predictor(tmp_path / MODEL_FILE)
    assert loaded.config == ckpt.config and loaded.layout.targets == ckpt.layout.targets
    for key, tensor in ckpt.model.state_dict().items():
        assert torch.equal(tensor, loaded.model.state_dict()[key])


def test_a_run_from_before_the_learned_cycle_loads_with_none(tmp_path):
    """model.cycle unset now means "chosen from the data"; a run that stored no cycle key had none."""
    payload = _payload(tmp_path)
    payload["config"]["model"].pop("cycle")
    torch.save(payload, tmp_path / "old.pt")
    assert load_predictor(tmp_path / "old.pt").config.model.cycle == 0


def test_a_format_7_checkpoint_still_loads(tmp_path):
    """Format 8 only widened the fallback's names, so a run saved before the candidates reads as it was."""
    payload = _payload(tmp_path)
    payload["format_version"] = 7
    torch.save(payload, tmp_path / "old.pt")
    assert load_predictor(tmp_path / "old.pt").config == _valid_checkpoint().config
