"""`predict(run, csv)`: the next `horizon` steps after the CSV's last row, in original units."""

from __future__ import annotations

import contextlib
import dataclasses
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from pandas.tseries.frequencies import to_offset

from tsformer.checkpoint import Checkpoint, load_checkpoint, resolve_checkpoint
from tsformer.data import read_series
from tsformer.errors import DataError
from tsformer.fallback import all_forecasts, apply, season_for
from tsformer.files import atomic_open, check_output_path
from tsformer.intervals import label


@dataclass(frozen=True)
class Forecast:
    frame: pd.DataFrame  # indexed by the future timestamps (named like the time column), one column per target
    notes: tuple[str, ...]  # how the CSV was read (date order, frequency), for the user

    def to_csv(self) -> str:
        return self.frame.to_csv()


def predict(run: str | Path, csv: str | Path, out: Path | None = None, plot: Path | None = None) -> Forecast:
    """Forecast after the last row of `csv`; a history shorter than context_len is left-padded and masked.

    With `out` and/or `plot`, the CSV and the PNG are written atomically, and only when both succeed;
    unusable output paths are refused before any work.
    """
    for path, flag in ((out, "--out"), (plot, "--plot")):
        if path is not None:
            check_output_path(path, flag)
    ckpt = load_checkpoint(resolve_checkpoint(run))
    history, notes = read_history(ckpt, csv)
    forecast = Forecast(forecast_frame(ckpt, history), notes)
    with contextlib.ExitStack() as stack:  # every file is renamed into place only after all were written
        if out is not None:
            stack.enter_context(atomic_open(out)).write(forecast.to_csv().encode("utf-8"))
        if plot is not None:
            from tsformer.plots import plot_forecast

            image = io.BytesIO()
            plot_forecast(history.iloc[-4 * ckpt.config.model.horizon :], forecast.frame, image)
            stack.enter_context(atomic_open(plot)).write(image.getbuffer())
    return forecast


def read_history(ckpt: Checkpoint, csv: str | Path) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """The CSV's target columns (as trained) indexed by timestamp, checked against the checkpoint; and notes."""
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
    history = pd.DataFrame(frame.values, index=frame.timestamps.rename(ckpt.time_col), columns=list(frame.columns))
    return history, frame.notes


def forecast_frame(ckpt: Checkpoint, history: pd.DataFrame) -> pd.DataFrame:
    cfg = ckpt.config.model
    model = ckpt.build_model()
    recent = history.to_numpy()[-cfg.context_len :]  # (<= L, C), NaN where a cell is unobserved
    n_real = len(recent)
    context = torch.zeros(1, cfg.context_len, len(ckpt.columns))
    context[0, cfg.context_len - n_real :] = torch.from_numpy(np.nan_to_num(ckpt.scaler.transform(recent)))
    observed = torch.zeros(1, cfg.context_len, len(ckpt.columns), dtype=torch.bool)  # left padding unobserved
    observed[0, cfg.context_len - n_real :] = torch.from_numpy(~np.isnan(recent))
    forecasts = all_forecasts(model, context, observed, season_for(ckpt.freq, cfg.context_len))
    scaled = apply(ckpt.fallback, forecasts)[0].numpy()  # (H, C): per column, the forecaster chosen on validation
    offset = to_offset(ckpt.freq)
    timestamps = pd.date_range(history.index[-1] + offset, periods=cfg.horizon, freq=offset, name=ckpt.time_col)
    point = ckpt.scaler.inverse(scaled)
    widths = [] if ckpt.interval_widths is None else ckpt.interval_widths.numpy()  # (n_levels, H, C), scaled
    bands = [
        (label(level), ckpt.scaler.inverse(scaled - width), ckpt.scaler.inverse(scaled + width))
        for level, width in zip(ckpt.interval_levels, widths, strict=True)
    ]
    columns = {}
    for j, name in enumerate(ckpt.columns):  # each target, then its intervals: OT, OT_lower_80, OT_upper_80, ...
        columns[name] = point[:, j]
        for tag, lower, upper in bands:
            columns[f"{name}_lower_{tag}"], columns[f"{name}_upper_{tag}"] = lower[:, j], upper[:, j]
    return pd.DataFrame(columns, index=timestamps)
