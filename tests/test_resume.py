"""Interrupted runs: atomic checkpoints, exact resume after kill -9, clean Ctrl-C, NaN stops, no silent overwrite."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import PINNED_FLAGS, hourly_series, start_tsformer, wait_for
from typer.testing import CliRunner

import tsformer.checkpoint as checkpoint_module
import tsformer.train as train_module
from tsformer.checkpoint import save_predictor
from tsformer.cli import app
from tsformer.config import load_config, save_config
from tsformer.data import training_data
from tsformer.errors import CheckpointError, TrainingError
from tsformer.model import Forecaster
from tsformer.model.inference import inference_batch_size
from tsformer.predictor import load_predictor, load_train_state
from tsformer.runfolder import LAST_FILE, MODEL_FILE
from tsformer.train import train

EPOCHS = 6
# A tiny model on one thread: exactly reproducible on CPU, an epoch of about a second.
TINY = [
    "--context-len", "16", "--horizon", "4", "--seed", "7",
    "--set", "model.d_model=8", "--set", "model.n_heads=2", "--set", "model.d_ff=16",
    "--set", "model.patch_len=4", "--set", "model.n_layers=1", "--set", "model.dropout=0.2",
    "--set", "train.batch_size=16", "--set", "train.patience=100", "--set", "train.num_threads=1", *PINNED_FLAGS,
]  # fmt: skip


@pytest.fixture
def series_csv(tmp_path: Path) -> Path:
    """Two hourly series, 2,400 rows: about 1,660 training windows."""
    path = tmp_path / "series.csv"
    hourly_series(2400).to_csv(path, index=False)
    return path


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _train_argv(csv: Path, out: Path, epochs: int = EPOCHS) -> list[str]:
    return ["train", str(csv), "--out", str(out), "--epochs", str(epochs), *TINY]


def _run_cli(argv: list[str]):
    result = CliRunner().invoke(app, argv)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def _saved_epoch(run: Path) -> int:
    """The epoch in the run's last.pt; 0 while there is none."""
    if not (run / LAST_FILE).is_file():
        return 0
    return load_train_state(run / LAST_FILE)[1]["loop"]["epoch"]


def _wait_for_epoch(proc: subprocess.Popen, run: Path, epoch: int, deadline_s: float = 60) -> None:
    wait_for(lambda: _saved_epoch(run) >= epoch, proc, f"checkpoint for epoch {epoch}", deadline_s)


def _epoch_seconds(run: Path) -> float:
    loop = load_train_state(run / LAST_FILE)[1]["loop"]  # not history.csv: it may be mid-write
    return loop["train_seconds"] / loop["epoch"]


def _assert_same_run(a: Path, b: Path) -> None:
    """Same weights, optimizer state, early-stopping state and losses, bit for bit."""
    for name in (MODEL_FILE, LAST_FILE):
        left, right = load_predictor(a / name), load_predictor(b / name)
        assert left.model.state_dict().keys() == right.model.state_dict().keys()
        for key, tensor in left.model.state_dict().items():
            assert torch.equal(tensor, right.model.state_dict()[key]), f"{name}: {key} differs"
    left, right = load_train_state(a / LAST_FILE)[1], load_train_state(b / LAST_FILE)[1]
    for key, state in left["optimizer"]["state"].items():
        for field, tensor in state.items():
            assert torch.equal(tensor, right["optimizer"]["state"][key][field]), f"optimizer {key}.{field} differs"
    assert torch.equal(left["rng"], right["rng"])
    drop_times = {"train_seconds", "history"}
    assert {k: v for k, v in left["loop"].items() if k not in drop_times} == {
        k: v for k, v in right["loop"].items() if k not in drop_times
    }
    columns = ["epoch", "train_loss", "val_loss", "lr"]
    pd.testing.assert_frame_equal(
        pd.read_csv(a / "history.csv")[columns], pd.read_csv(b / "history.csv")[columns], check_exact=True
    )


def test_kill_9_mid_epoch_then_resume_matches_uninterrupted_run(series_csv, tmp_path, restore_threads):
    killed = tmp_path / "killed"
    proc = start_tsformer(_train_argv(series_csv, killed), tmp_path / "killed.log")
    try:
        _wait_for_epoch(proc, killed, 2)
        time.sleep(0.5 * _epoch_seconds(killed))  # about half-way through epoch 3
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stopped_at = _saved_epoch(killed)  # a kill -9 leaves a loadable last.pt
    assert 2 <= stopped_at < EPOCHS, f"the kill came after the run finished (epoch {stopped_at})"
    with pytest.raises(CheckpointError, match="holds no training state"):  # model.pt is the best epoch's predictor
        load_train_state(killed / MODEL_FILE)

    resumed = _run_cli(["train", "--resume", "--out", str(killed), "--quiet"])
    assert resumed.exit_code == 0, resumed.output
    assert f"of {EPOCHS}" in resumed.output

    reference = tmp_path / "reference"
    result = _run_cli([*_train_argv(series_csv, reference), "--quiet"])
    assert result.exit_code == 0, result.output
    _assert_same_run(reference, killed)
    assert len(pd.read_csv(killed / "history.csv")) == EPOCHS


def test_ctrl_c_stops_cleanly_and_says_how_to_resume(series_csv, tmp_path, restore_threads):
    run = tmp_path / "run"
    # 12 epochs of a fraction of a second each: the signal lands well before the last one on a fast machine
    proc = start_tsformer(_train_argv(series_csv, run, epochs=12), tmp_path / "run.log")
    try:
        _wait_for_epoch(proc, run, 1)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = (tmp_path / "run.log").read_text()
    assert code == 130, output
    assert "Traceback" not in output
    error = output.strip().splitlines()[-1]
    saved = _saved_epoch(run)
    assert error == (
        f"Error: training stopped during epoch {saved + 1}; epoch {saved} is saved in {run / LAST_FILE}. "
        f"Resume with: tsformer train --resume --out {run}"
    ), output
    assert 1 <= saved < 12
    assert not list(run.glob(".*.tmp")), "a temporary checkpoint was left behind"
    for command in (["evaluate", str(run)], ["predict", str(run), str(series_csv)], ["check", str(run)]):
        unfinished = _run_cli(command)  # the best epoch's bare model is refused, not shipped
        assert unfinished.exit_code == 2, unfinished.output
        assert f"run {run} is unfinished" in unfinished.output and f"--resume --out {run}" in unfinished.output

    resumed = _run_cli(["train", "--resume", "--out", str(run), "--quiet"])
    assert resumed.exit_code == 0, resumed.output
    assert _saved_epoch(run) > saved and load_train_state(run / LAST_FILE)[1]["loop"]["finished"]


def test_ctrl_c_after_the_last_epoch_says_how_to_resume(series_csv, tmp_path, monkeypatch, restore_threads):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(train_module, "choose_and_calibrate", interrupted)  # candidates scored after the epochs
        run = tmp_path / "run"
        result = CliRunner().invoke(app, [*_train_argv(series_csv, run), "--quiet"])
    assert result.exit_code == 130
    assert result.output.strip() == (
        "Error: training stopped while the candidates were scored after the last epoch (its epochs are saved; "
        f"resume with: tsformer train --resume --out {run})"
    )
    resumed = CliRunner().invoke(app, ["train", "--resume", "--out", str(run), "--quiet"])
    assert resumed.exit_code == 0, resumed.output
    assert (run / MODEL_FILE).exists()


def test_a_run_whose_data_moved_resumes_from_the_new_path_its_fingerprint_matches(
    series_csv, tmp_path, monkeypatch, restore_threads
):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(train_module, "choose_and_calibrate", interrupted)  # stopped with its epochs saved
        run = tmp_path / "run"
        assert CliRunner().invoke(app, [*_train_argv(series_csv, run, epochs=2), "--quiet"]).exit_code == 130
    moved = tmp_path / "moved"
    moved.mkdir()
    series_csv.rename(moved / "series.csv")
    result = CliRunner().invoke(app, ["train", "--resume", "--out", str(run), "--quiet"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"Error: run {run} trained on {series_csv}, which is not there now; if the file moved, give its new path: "
        f"tsformer train --resume --out {run} NEW_PATH"
    )
    other = tmp_path / "other.csv"
    hourly_series(2424).to_csv(other, index=False)
    result = CliRunner().invoke(app, ["train", "--resume", "--out", str(run), str(other), "--quiet"])
    assert result.exit_code == 2 and "changed since run" in result.stderr and "rows 2400 -> 2424" in result.stderr
    argv = ["train", "--resume", "--out", str(run), "series.csv", "--data-dir", str(moved), "--quiet"]
    result = CliRunner().invoke(app, argv)  # a bare name is found in --data-dir, as for a new run
    assert result.exit_code == 0, result.output
    assert load_config(run / "config.yaml").data.path == str(moved / "series.csv")
    finished = load_predictor(run / MODEL_FILE)
    assert finished.summary is not None and finished.config.data.path == str(moved / "series.csv")
    assert finished.given.data.path == str(moved / "series.csv")
    again = tmp_path / "again.csv"
    (moved / "series.csv").rename(again)  # moved once more, after the run finished
    result = CliRunner().invoke(app, ["train", "--resume", "--out", str(run), str(again), "--quiet"])
    assert result.exit_code == 0 and "is a finished run: nothing to resume" in result.stderr, result.output
    assert load_config(run / "config.yaml").data.path == str(again)
    assert load_predictor(run / MODEL_FILE).config.data.path == str(again)
    assert load_train_state(run / LAST_FILE)[0].config.data.path == str(again)
    assert CliRunner().invoke(app, ["evaluate", str(run)]).exit_code == 0  # finds its data without --csv


def test_ctrl_c_before_any_epoch_says_nothing_was_saved(series_csv, tmp_path, monkeypatch, restore_threads):
    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "lr_at", interrupted)  # the first training step
    run = tmp_path / "run"
    result = CliRunner().invoke(app, [*_train_argv(series_csv, run), "--quiet"])
    assert result.exit_code == 130
    assert result.output.strip() == (
        f"Error: training stopped during epoch 1; no epoch was saved and {run} was left as it was, so start again"
    )
    assert not run.exists() and not list(tmp_path.glob(".run.*")), "a half-made run was left behind"


def _nan_from(monkeypatch, method: str, call: int) -> None:
    """Make training-time Forecaster.<method> calls return NaN from the `call`-th on.

    Training-time: `forward` with a target (a training step), `_inference` in train mode (validation, which
    keeps the best epoch's forecasts and quantiles).
    """
    original = getattr(Forecaster, method)
    count = {"n": 0}

    def poisoned(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if (method == "forward" and kwargs.get("target") is None) or (method == "_inference" and not self.training):
            return out
        count["n"] += 1
        if count["n"] < call:
            return out
        return (out[0], out[1] * float("nan")) if method == "forward" else (out[0] * float("nan"), out[1])

    monkeypatch.setattr(Forecaster, method, poisoned)


def _n_batches(cfg, split: str, batch_size: int | None = None) -> int:
    """Batches of `split`'s windows: of batch_size, or of the model's inference batch."""
    data = training_data(cfg)
    batch_size = batch_size or inference_batch_size(data.layout.n_targets, cfg.model.channel_independent)
    return -(-len(data.windows(split)) // batch_size)


def _tiny_config(csv: Path, epochs: int = 4):
    overrides = [value for flag, value in zip(TINY[::2], TINY[1::2], strict=True) if flag == "--set"]
    return load_config(
        None, [f"data.path={csv}", "model.context_len=16", "model.horizon=4", f"train.epochs={epochs}", *overrides]
    )


def test_nan_training_loss_stops_and_keeps_last_good_checkpoint(series_csv, tmp_path, monkeypatch, restore_threads):
    cfg = _tiny_config(series_csv)
    run = tmp_path / "run"
    _nan_from(monkeypatch, "forward", call=_n_batches(cfg, "train", cfg.train.batch_size) + 3)  # epoch 2, step 3
    with pytest.raises(TrainingError) as caught:
        train(cfg, run, show_progress=False)
    message = str(caught.value)
    assert "training loss became nan at epoch 2, step 3" in message
    assert str(run / LAST_FILE) in message and "train.lr" in message
    kept, state = load_train_state(run / LAST_FILE)
    assert state["loop"]["epoch"] == 1
    assert all(torch.isfinite(t).all() for t in kept.model.state_dict().values())


def test_nan_validation_loss_does_not_overwrite_last_good_checkpoint(
    series_csv, tmp_path, monkeypatch, restore_threads
):
    cfg = _tiny_config(series_csv)
    run = tmp_path / "run"
    _nan_from(monkeypatch, "_inference", call=_n_batches(cfg, "val") + 1)  # epoch 2
    with pytest.raises(TrainingError, match="validation loss became nan at epoch 2"):
        train(cfg, run, show_progress=False)
    assert load_train_state(run / LAST_FILE)[1]["loop"]["epoch"] == 1


def test_nan_in_first_epoch_says_nothing_was_saved(series_csv, tmp_path, monkeypatch, restore_threads):
    _nan_from(monkeypatch, "forward", call=2)
    run = tmp_path / "run"
    with pytest.raises(TrainingError) as caught:
        train(_tiny_config(series_csv), run, show_progress=False)
    assert "no epoch was saved" in str(caught.value)
    assert not run.exists() and not list(tmp_path.glob(".run.*")), "a half-made run was left behind"


def test_existing_run_folder_is_not_overwritten(series_csv, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "model.pt").write_bytes(b"precious")
    result = CliRunner().invoke(app, _train_argv(series_csv, run))
    assert result.exit_code == 2
    assert "Error: run folder" in result.output and "--overwrite" in result.output and "--resume" in result.output
    assert (run / "model.pt").read_bytes() == b"precious"


def test_kill_during_checkpoint_write_keeps_previous_file(tmp_path, monkeypatch):
    """A write that dies before the rename leaves the old file whole (the rename is the commit)."""
    cfg = load_config(
        None,
        [
            "model.context_len=16",
            "model.horizon=4",
            "model.d_model=8",
            "model.n_heads=2",
            "model.d_ff=16",
            "model.patch_len=4",
            "model.cycle=0",
            "train.loss=mse",
            "data.calendar=true",
        ],
    )
    ckpt = _checkpoint_for(cfg)
    path = tmp_path / LAST_FILE
    save_predictor(ckpt, path)
    before = path.read_bytes()

    def dies_half_way(obj, handle, *args, **kwargs):
        handle.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint_module.torch, "save", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        save_predictor(ckpt, path)
    assert path.read_bytes() == before
    assert load_predictor(path).config == cfg
    assert sorted(p.name for p in tmp_path.iterdir()) == [LAST_FILE]


def _checkpoint_for(cfg):
    from tsformer.data import Scaler, SplitBorders
    from tsformer.layout import Layout
    from tsformer.predictor import Predictor

    layout = Layout(("load", "temp"), calendar=("day_sin", "day_cos", "week_sin", "week_cos"))  # hourly data's
    return Predictor(
        config=cfg,
        layout=layout,
        time_col="date",
        freq="h",
        id_cols=(),
        series=((),),
        scaler=Scaler(mean=np.zeros((1, 2), np.float32), std=np.ones((1, 2), np.float32)),
        borders=SplitBorders.from_list([[70], [80], [100]]),
        model=Forecaster(cfg.model, layout, cfg.train.loss),
        data_fingerprint={"rows": 100, "first": "2024-01-01 00:00:00", "last": "2024-01-05 03:00:00", "sha256": "0"},
    )


@pytest.mark.parametrize("change", ["append", "edit"])
def test_resume_refuses_data_that_changed_since_the_run_started(series_csv, tmp_path, change, restore_threads):
    cfg = _tiny_config(series_csv, epochs=1)
    run = tmp_path / "run"
    train(cfg, run, show_progress=False)
    frame = pd.read_csv(series_csv)
    if change == "append":
        more = hourly_series(2424).iloc[2400:]
        frame = pd.concat([frame, more])
    else:
        frame.loc[5, "load"] += 1.0
    frame.to_csv(series_csv, index=False)
    result = CliRunner().invoke(app, ["train", "--resume", "--out", str(run), "--quiet"])
    assert result.exit_code == 2, result.output
    error = result.stderr.strip()
    assert error.startswith(f"Error: {series_csv} changed since run {run} started (")
    assert ("rows 2400 -> 2424" in error) == (change == "append") and "sha256" in error
    assert error.endswith(
        f"start a new run instead (tsformer train ... --out NEW_FOLDER, or --overwrite to replace {run})"
    )
    assert load_train_state(run / LAST_FILE)[1]["loop"]["epoch"] == 1


def test_resuming_a_finished_run_rewrites_its_history_from_last_pt_and_remakes_nothing(
    series_csv, tmp_path, monkeypatch, capsys
):
    """A kill between writing last.pt and history.csv leaves history.csv an epoch short; --resume of the
    (finished) run writes it whole from the history last.pt holds."""
    cfg = _tiny_config(series_csv, epochs=2)
    run = tmp_path / "run"
    train(cfg, run, show_progress=False)
    whole = (run / "history.csv").read_text()
    (run / "history.csv").write_text("".join(whole.splitlines(keepends=True)[:-1]))  # the last epoch lost
    resolved = (run / "config.yaml").read_text()
    save_config(cfg, run / "config.yaml")  # the config as given, as a kill before the last write leaves it
    assert (run / "config.yaml").read_text() != resolved
    model = (run / "model.pt").read_bytes()
    calls = []
    monkeypatch.setattr(train_module, "choose_and_calibrate", lambda *a, **k: calls.append(a))
    train(cfg, run, resume=True, show_progress=False)
    assert (run / "history.csv").read_text() == whole
    assert (run / "config.yaml").read_text() == resolved  # the config resolved to the end, written again
    assert calls == [] and (run / "model.pt").read_bytes() == model  # nothing made again: the same run
    assert "is a finished run: nothing to resume" in capsys.readouterr().err


def test_a_reader_that_goes_away_stops_the_display_not_training(series_csv, tmp_path):
    """`tsformer train ... 2>&1 | head -1`: the pipe closes after the first line, and the run still finishes."""
    run = tmp_path / "run"
    reader = subprocess.Popen(["head", "-1"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    trainer = subprocess.Popen(
        [sys.executable, "-m", "tsformer", *_train_argv(series_csv, run, epochs=3)],
        stdout=reader.stdin,
        stderr=subprocess.STDOUT,
    )
    reader.stdin.close()  # only head holds the pipe's reading end now
    assert trainer.wait(timeout=300) == 0 and reader.wait(timeout=60) == 0
    finished = load_predictor(run / "model.pt")
    assert finished.summary is not None and finished.calibration is not None  # fallback, intervals: all made


def test_a_run_whose_epochs_took_other_steps_is_not_resumed(series_csv, tmp_path, monkeypatch, restore_threads):
    cfg = _tiny_config(series_csv)
    run = tmp_path / "run"
    _nan_from(monkeypatch, "forward", call=_n_batches(cfg, "train", cfg.train.batch_size) + 3)  # epoch 1 saved
    with pytest.raises(TrainingError):
        train(cfg, run, show_progress=False)
    monkeypatch.undo()
    steps = train_module._steps_per_epoch
    monkeypatch.setattr(train_module, "_steps_per_epoch", lambda n, batch: steps(n, batch) + 1)  # another batching
    with pytest.raises(
        CheckpointError, match=r"took \d+ optimiser steps to the end of epoch 1, where this version takes"
    ):
        train(cfg, run, resume=True, show_progress=False)
