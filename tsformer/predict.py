"""`predict(run, csv)`: the next `horizon` steps after the CSV's last row, in original units."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import torch
from pandas.tseries.frequencies import to_offset

from tsformer.checkpoint import Checkpoint, load_checkpoint, resolve_checkpoint
from tsformer.data import read_series
from tsformer.errors import DataError


def predict(run: str | Path, csv: str | Path) -> pd.DataFrame:
    """Forecast after the last row of `csv`; a history shorter than context_len is left-padded and masked.

    Returns a frame indexed by the future timestamps (named like the time column), one column per target.
    """
    ckpt = load_checkpoint(resolve_checkpoint(run))
    history = read_history(ckpt, csv)
    return forecast_frame(ckpt, history)


def read_history(ckpt: Checkpoint, csv: str | Path) -> pd.DataFrame:
    """The CSV's target columns (as trained) indexed by timestamp, checked against the checkpoint."""
    data_cfg = dataclasses.replace(ckpt.config.data, path=str(csv), targets=ckpt.columns, time_col=ckpt.time_col)
    try:
        frame = read_series(csv, data_cfg, expected_freq=ckpt.freq)
    except DataError as exc:
        if str(exc).startswith(("target column", "time column")):
            raise DataError(
                f"{csv} does not match the model, which was trained on columns {', '.join(ckpt.columns)} "
                f"with time column {ckpt.time_col!r}: {exc}"
            ) from None
        raise
    return pd.DataFrame(frame.values, index=frame.timestamps.rename(ckpt.time_col), columns=list(frame.columns))


def forecast_frame(ckpt: Checkpoint, history: pd.DataFrame) -> pd.DataFrame:
    cfg = ckpt.config.model
    model = ckpt.build_model()
    recent = history.to_numpy()[-cfg.context_len :]  # (<= L, C)
    n_real = len(recent)
    context = torch.zeros(1, cfg.context_len, len(ckpt.columns))
    context[0, cfg.context_len - n_real :] = torch.from_numpy(ckpt.scaler.transform(recent))
    pad_mask = torch.zeros(1, cfg.context_len, dtype=torch.bool)
    pad_mask[0, cfg.context_len - n_real :] = True
    scaled = model.predict(context, pad_mask)[0].numpy()  # (H, C)
    offset = to_offset(ckpt.freq)
    timestamps = pd.date_range(history.index[-1] + offset, periods=cfg.horizon, freq=offset, name=ckpt.time_col)
    return pd.DataFrame(ckpt.scaler.inverse(scaled), index=timestamps, columns=list(ckpt.columns))
