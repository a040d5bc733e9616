"""Run folders under failure: one writer at a time, and after any failure the old run, a resumable run, or none.

Real processes are started, stopped with SIGTERM and SIGKILL, and run side by side; a full disk is
an injected ENOSPC.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import PINNED_FLAGS, hourly_series, start_tsformer, tiny_config, wait_for, write_csv
from typer.testing import CliRunner

import tsformer.files as files_module
from tsformer.cli import app
from tsformer.errors import ConfigError, TrainingError
from tsformer.model import Forecaster
from tsformer.predictor import load_train_state
from tsformer.runfolder import LAST_FILE, MODEL_FILE, claim
from tsformer.train import train

# A tiny model on one thread; with 12,000 rows an epoch takes several seconds, time to interrupt it.
TINY = [
    "--context-len", "16", "--horizon", "4", "--quiet",
    "--set", "model.d_model=8", "--set", "model.n_heads=2", "--set", "model.d_ff=16",
    "--set", "model.patch_len=4", "--set", "model.n_layers=1",
    "--set", "train.batch_size=16", "--set", "train.num_threads=1", *PINNED_FLAGS,
]  # fmt: skip


@pytest.fixture
def long_csv(tmp_path: Path) -> Path:
    path = tmp_path / "long.csv"
    hourly_series(12000).to_csv(path, index=False)
    return path


def _argv(csv: Path, out: Path, *extra: str) -> list[str]:
    return ["train", str(csv), "--out", str(out), "--epochs", "20", *TINY, *extra]


def _stop(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    return proc.wait(timeout=60)


def _staging(run: Path) -> Path:
    return run.parent / f".{run.name}.staging"


def _old_run(tmp_path: Path) -> Path:
    """A finished tiny run whose model.pt bytes the tests compare against."""
    csv = write_csv(tmp_path / "old.csv", hourly_series(300))
    run = tmp_path / "run"
    train(tiny_config(csv), run, show_progress=False)
    return run


def test_a_second_writer_is_refused_while_the_first_trains(long_csv, tmp_path):
    run = tmp_path / "run"
    first = start_tsformer(_argv(long_csv, run), tmp_path / "first.log")
    try:
        wait_for(lambda: (_staging(run) / "config.yaml").exists(), first, "the first run's staging folder")
        second = subprocess.run(
            [sys.executable, "-m", "tsformer", *_argv(long_csv, run, "--overwrite")], capture_output=True, text=True
        )
        assert second.returncode == 2, second.stderr
        assert second.stderr.strip() == (
            f"Error: run folder {run} is being written by another tsformer (process {first.pid}); "
            "wait for it to finish, or choose another --out"
        )
        assert first.poll() is None  # the first run goes on, its files untouched (staged, or published by now)
        assert (_staging(run) / "config.yaml").exists() or (run / "config.yaml").exists()
    finally:
        _stop(first)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_run_stopped_before_its_first_epoch_leaves_the_old_run(long_csv, tmp_path, sig):
    run = _old_run(tmp_path)
    before = (run / MODEL_FILE).read_bytes()
    proc = start_tsformer(_argv(long_csv, run, "--overwrite"), tmp_path / "new.log")
    try:
        wait_for(lambda: (_staging(run) / "config.yaml").exists(), proc, "the new run's staging folder")
    finally:
        code = _stop(proc, sig)
    assert (run / MODEL_FILE).read_bytes() == before, "the old run was replaced by one that never saved an epoch"
    if sig == signal.SIGTERM:  # stopped cleanly, like Ctrl-C: nothing of the new run is left
        log = (tmp_path / "new.log").read_text()
        assert code == 143 and "Traceback" not in log, log  # SIGTERM's own code, as a scheduler expects
        assert log.strip().endswith(f"no epoch was saved and {run} was left as it was, so start again")
        assert not _staging(run).exists() and not (tmp_path / ".run.lock").exists()


def test_a_run_killed_before_its_first_epoch_leaves_no_run_and_a_rerun_needs_no_overwrite(long_csv, tmp_path):
    run = tmp_path / "run"
    proc = start_tsformer(_argv(long_csv, run), tmp_path / "killed.log")
    try:
        wait_for(lambda: (_staging(run) / "config.yaml").exists(), proc, "the staging folder")
    finally:
        _stop(proc, signal.SIGKILL)
    assert not run.exists()
    short_csv = write_csv(tmp_path / "short.csv", hourly_series(300))
    result = CliRunner().invoke(app, ["train", str(short_csv), "--out", str(run), "--epochs", "1", *TINY[:-2]])
    assert result.exit_code == 0, result.output
    assert f"took over the lock of {run} left by process {proc.pid}, which is no longer running" in result.stderr
    assert (run / LAST_FILE).exists() and not _staging(run).exists() and not (tmp_path / ".run.lock").exists()


def test_sigterm_after_an_epoch_leaves_a_resumable_run(long_csv, tmp_path):
    run = tmp_path / "run"
    proc = start_tsformer(_argv(long_csv, run, "--set", "train.train_stride=8"), tmp_path / "run.log")
    try:
        wait_for(lambda: (run / LAST_FILE).exists(), proc, "the first epoch", deadline_s=120)
    finally:
        code = _stop(proc, signal.SIGTERM)
    log = (tmp_path / "run.log").read_text()
    assert code == 143 and f"Resume with: tsformer train --resume --out {run}" in log, log
    assert load_train_state(run / LAST_FILE)[1]["loop"]["epoch"] >= 1


def test_overwrite_keeps_the_old_run_when_the_new_one_fails(tmp_path, monkeypatch):
    run = _old_run(tmp_path)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    original = Forecaster.forward

    def nan_loss(self, *args, **kwargs):
        forecast, loss = original(self, *args, **kwargs)
        return forecast, None if loss is None else loss * float("nan")

    monkeypatch.setattr(Forecaster, "forward", nan_loss)
    with pytest.raises(TrainingError, match="no epoch was saved"):
        train(tiny_config(tmp_path / "old.csv"), run, overwrite=True, show_progress=False)
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.csv", "run"]


def test_a_full_disk_is_one_error_naming_the_run_file_and_keeps_the_old_run(tmp_path, monkeypatch):
    run = _old_run(tmp_path)
    before = (run / MODEL_FILE).read_bytes()

    def disk_full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files_module.os, "fsync", disk_full)
    argv = ["train", str(tmp_path / "old.csv"), "--out", str(run), "--overwrite", "--epochs", "1", *TINY]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2
    staged = _staging(run)
    assert result.stderr.strip() == (
        f"Error: No space left on device ({staged / 'config.yaml'}); "
        "check the path, its permissions and the free disk space"
    )
    assert (run / MODEL_FILE).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.csv", "run"]


def test_overwrite_refuses_a_folder_that_is_not_a_run(tmp_path):
    folder = tmp_path / "documents"
    folder.mkdir()
    (folder / "thesis.tex").write_text("precious")
    with pytest.raises(ConfigError, match="not a tsformer run folder"):
        claim(folder, overwrite=True, resume=False)
    assert (folder / "thesis.tex").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["documents"]
    project = tmp_path / "project"  # another program's config.yaml and model.pt: no proof of a run
    (project / "src").mkdir(parents=True)
    (project / "config.yaml").write_text("name: myapp\n")
    (project / MODEL_FILE).write_bytes(b"weights")
    with pytest.raises(ConfigError, match="not a tsformer run folder"):
        claim(project, overwrite=True, resume=False)
    (project / "config.yaml").write_text("data: {}\nmodel: {}\ntrain: {}\n")  # tsformer's sections: a run
    claim(project, overwrite=True, resume=False).release()


def test_claim_publish_release(tmp_path):
    run = tmp_path / "run"
    folder = claim(run, overwrite=False, resume=False)
    with pytest.raises(ConfigError, match="being written by another tsformer"):
        claim(run, overwrite=True, resume=False)  # even in the same process: the lock is per open file
    (folder.path / "config.yaml").write_text("x")
    assert not run.exists()
    folder.publish()
    assert (run / "config.yaml").read_text() == "x" and folder.published
    folder.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_out_dot_trains_into_the_current_empty_folder(tmp_path, monkeypatch):
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    folder = claim(Path("."), overwrite=False, resume=False)
    assert folder.path == tmp_path / ".here.staging" and (tmp_path / ".here.lock").exists()
    folder.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]


def test_a_kill_between_publishs_renames_is_recovered_by_the_next_claim(tmp_path):
    run = tmp_path / "run"
    staged = tmp_path / ".run.staging"
    staged.mkdir()
    (staged / LAST_FILE).write_bytes(b"epoch 1")  # the new run had saved an epoch; the old one was moved aside
    (tmp_path / ".run.replaced").mkdir()
    folder = claim(run, overwrite=False, resume=True)
    assert (run / LAST_FILE).read_bytes() == b"epoch 1"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run.lock", "run"]
    folder.release()
