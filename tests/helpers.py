"""Small data and config builders shared by the tests."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from tsformer.candidates import BUILT_IN
from tsformer.config import Config, DataConfig, ModelConfig, TrainConfig
from tsformer.layout import Layout

TINY_SIZE_FLAGS = [
    "--context-len",
    "16",
    "--horizon",
    "4",
    "--epochs",
    "2",
    "--set",
    "model.patch_len=4",
    "--set",
    "model.d_model=8",
    "--set",
    "model.n_heads=2",
    "--set",
    "model.d_ff=16",
    "--set",
    "model.n_layers=1",
    "--set",
    "train.batch_size=32",
]
# the automatic settings given, as the defaults were before they were chosen from the data (tests/test_choices.py
# covers choosing them), one validation horizon in long format and no final fit (tests/test_final.py covers both),
# the built-in candidates (tests/test_classical.py covers ETS and Theta), one member (tests/test_ensemble.py: more),
# and the trained model, never its least-squares start, so that a test sees what training made
# (tests/test_linear_start.py covers the start)
PINNED_FLAGS = [
    "--set",
    "data.calendar=true",
    "--set",
    "data.val_horizons=1",
    "--set",
    "train.final_fit=false",
    "--set",
    "train.loss=mse",
    "--set",
    "train.candidates=" + ",".join(BUILT_IN),
    "--set",
    "model.members=1",
]
TINY_FLAGS = TINY_SIZE_FLAGS + PINNED_FLAGS


def make_frame(n_rows: int = 240, n_series: int = 2, freq: str = "h", seed: int = 0) -> pd.DataFrame:
    """Hourly sines with noise: `date` plus columns a, b, ... ."""
    rng = np.random.default_rng(seed)
    t = np.arange(n_rows)
    data = {"date": pd.date_range("2024-01-01", periods=n_rows, freq=freq).strftime("%Y-%m-%d %H:%M:%S")}
    for j in range(n_series):
        data[chr(ord("a") + j)] = (10 * j + np.sin(2 * np.pi * t / 24 + j) + 0.1 * rng.normal(size=n_rows)).round(4)
    return pd.DataFrame(data)


def write_csv(path: Path, frame: pd.DataFrame) -> Path:
    frame.to_csv(path, index=False)
    return path


def tiny_config(csv: Path | str = "", fallback: bool = True, **model) -> Config:
    model_cfg = dict(
        context_len=16, horizon=4, patch_len=4, d_model=8, n_heads=2, n_layers=1, d_ff=16, dropout=0.0, members=1
    )
    model_cfg.update(model)
    return Config(  # the automatic settings given (tests/test_choices.py covers choosing them)
        data=DataConfig(path=str(csv), calendar=True, val_horizons=1),
        model=ModelConfig(**model_cfg),
        train=TrainConfig(
            epochs=2,
            batch_size=32,
            num_threads=1,
            patience=5,
            fallback=fallback,
            loss="mse",
            final_fit=False,
            candidates=BUILT_IN,
        ),
    )


def start_tsformer(argv: list[str], log: Path) -> subprocess.Popen:
    """`python -m tsformer ARGV` as a real process, stdout and stderr into `log`."""
    with log.open("w") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "tsformer", *argv],
            stdout=handle,
            stderr=subprocess.STDOUT,
            preexec_fn=_default_sigint,
        )


def _default_sigint() -> None:
    """Ctrl-C as a terminal sends it: a shell's background job ignores SIGINT, and its children inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(condition, proc: subprocess.Popen, what: str, deadline_s: float = 60) -> None:
    """Poll `condition()` until true; fail if `proc` exits first or the deadline passes."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert proc.poll() is None, f"the process exited with code {proc.returncode} before {what}"
        assert time.monotonic() < deadline, f"no {what} within {deadline_s} s"
        time.sleep(0.02)


def hourly_series(n_rows: int, seed: int = 0) -> pd.DataFrame:
    """Two noisy hourly series (load with a daily cycle, temp with a weekly one)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n_rows)
    return pd.DataFrame({
        "date": pd.date_range("2024-01-01", periods=n_rows, freq="h").strftime("%Y-%m-%d %H:%M:%S"),
        "load": 10 + 3 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 0.5, n_rows),
        "temp": 5 + np.sin(2 * np.pi * t / 168) + rng.normal(0, 0.2, n_rows),
    })  # fmt: skip


def layout_of(n_series: int, n_past: int = 0, n_future: int = 0, cycle: int = 0, **static) -> Layout:
    """A layout of made-up names: targets s0.., past-only covariates p0.., known-future ones f0..."""
    return Layout(
        tuple(f"s{j}" for j in range(n_series)),
        past=tuple(f"p{j}" for j in range(n_past)),
        future=tuple(f"f{j}" for j in range(n_future)),
        cycle=cycle,
        **static,
    )
