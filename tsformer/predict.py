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
from tsformer.data import Scaler, SeriesFrame, read_series
from tsformer.data.calendar import calendar_features
from tsformer.data.prepare import Layout, Windows, scale_season
from tsformer.errors import DataError
from tsformer.fallback import all_forecasts, apply, season_for, shipped_quantiles
from tsformer.files import atomic_open, check_output_path
from tsformer.intervals import adjust_quantiles, label, quantile_pairs


@dataclass(frozen=True)
class Forecast:
    """A wide file's forecast is indexed by the future timestamps (named like the time column), one column
    per target and interval bound; a long file's is long too: id columns, time column, then those columns."""

    frame: pd.DataFrame
    notes: tuple[str, ...]  # how the CSV was read (date order, frequency, new series), for the user
    long: bool = False

    def to_csv(self) -> str:
        return self.frame.to_csv(index=not self.long)


def predict(
    run: str | Path,
    csv: str | Path,
    out: Path | None = None,
    plot: Path | None = None,
    future: str | Path | None = None,
) -> Forecast:
    """Forecast after the last row of each series of `csv`; a history shorter than context_len is
    left-padded and masked. A model with known-future covariates reads their next `horizon` values of
    each series from the `future` CSV.

    With `out` and/or `plot`, the CSV and the PNG are written atomically, and only when both succeed;
    unusable output paths are refused before any work.
    """
    for path, flag in ((out, "--out"), (plot, "--plot")):
        if path is not None:
            check_output_path(path, flag)
    ckpt = load_checkpoint(resolve_checkpoint(run))
    frame = read_history(ckpt, csv)
    ahead = read_future(ckpt, frame, future)
    scaler, new_series = series_scaler(ckpt, frame)
    notes = frame.notes
    if new_series:
        notes += (
            f"{new_series} series were not in training; the global model forecasts them, scaled with their own history",
        )
    forecast = Forecast(forecast_frame(ckpt, frame, scaler, ahead), notes, long=bool(ckpt.id_cols))
    with contextlib.ExitStack() as stack:  # every file is renamed into place only after all were written
        if out is not None:
            stack.enter_context(atomic_open(out)).write(forecast.to_csv().encode("utf-8"))
        if plot is not None:
            from tsformer.plots import plot_forecast

            image = io.BytesIO()
            history, future = _plotted(ckpt, frame, forecast.frame)
            plot_forecast(history, future, image)
            stack.enter_context(atomic_open(plot)).write(image.getbuffer())
    return forecast


def read_history(ckpt: Checkpoint, csv: str | Path) -> SeriesFrame:
    """The CSV's series and target columns (as trained), checked against the checkpoint."""
    data_cfg = dataclasses.replace(
        ckpt.config.data,
        path=str(csv),
        targets=ckpt.columns,
        time_col=ckpt.time_col,
        id_cols=ckpt.id_cols,
        past_covs=ckpt.past_covs,
        future_covs=ckpt.future_covs,
    )
    try:
        return read_series(csv, data_cfg, expected_freq=ckpt.freq, expected_ids=ckpt.id_cols)
    except DataError as exc:
        if str(exc).startswith(("target column", "time column", "id column")):
            ids = f", id column{'s' * (len(ckpt.id_cols) > 1)} {', '.join(ckpt.id_cols)}" if ckpt.id_cols else ""
            raise DataError(
                f"{csv} does not match the model, which was trained on columns {', '.join(ckpt.columns)} "
                f"with time column {ckpt.time_col!r}{ids}: {exc}"
            ) from None
        raise


def read_future(ckpt: Checkpoint, history: SeriesFrame, future: str | Path | None) -> np.ndarray | None:
    """(n_ids, horizon, n_future) the known-future covariates of the `future` CSV: exactly the `horizon`
    steps after each series' last row; None when the model reads none from the data."""
    horizon = ckpt.config.model.horizon
    if not ckpt.future_covs:
        return None
    if future is None:
        raise DataError(
            f"the model reads the known-future covariates {', '.join(ckpt.future_covs)}; pass --future CSV with "
            f"their values for the {horizon} steps after each series' last row"
        )
    data_cfg = dataclasses.replace(
        ckpt.config.data,
        path=str(future),
        targets=ckpt.future_covs,
        time_col=ckpt.time_col,
        id_cols=ckpt.id_cols,
        past_covs=(),
        future_covs=(),
        fill="",
    )
    try:
        frame = read_series(future, data_cfg, expected_freq=ckpt.freq, expected_ids=ckpt.id_cols)
    except DataError as exc:
        raise DataError(f"--future {future}: {str(exc).replace('target column', 'covariate')}") from None
    rows = {key: i for i, key in enumerate(frame.keys)}
    offset = to_offset(ckpt.freq)
    out = np.empty((history.n_ids, horizon, len(ckpt.future_covs)), dtype=np.float32)
    for i, key in enumerate(history.keys):
        where = f"series {'/'.join(key)!r}" if ckpt.id_cols else "the forecast"
        if key not in rows:
            raise DataError(f"--future {future} has no rows for {where}; give its next {horizon} steps")
        span = frame.rows_of(rows[key])
        expected = history.timestamps[int(history.bounds[i + 1]) - 1] + offset
        if span.stop - span.start != horizon or frame.timestamps[span.start] != expected:
            raise DataError(
                f"--future {future} has {span.stop - span.start} rows from {frame.timestamps[span.start]} for {where}, "
                f"but needs exactly the {horizon} steps from {expected} (after the history's last row)"
            )
        if not frame.observed[span].all():
            raise DataError(f"--future {future} misses covariate values for {where}; give every value")
        out[i] = frame.values[span]
    return out


def series_scaler(ckpt: Checkpoint, frame: SeriesFrame) -> tuple[Scaler, int]:
    """Each series' scaler: the run's for a series it was trained on; for a new series (long format), the
    statistics of its own history, which all lies before the forecast origin. Returns it and the count of
    new series."""
    if not ckpt.id_cols:
        return ckpt.scaler, 0
    known = {key: i for i, key in enumerate(ckpt.series)}
    means, stds, new = [], [], 0
    for i, key in enumerate(frame.keys):
        if key in known:
            means.append(ckpt.scaler.mean[known[key]])
            stds.append(ckpt.scaler.std[known[key]])
            continue
        new += 1
        own = Scaler.fit(frame.inputs()[frame.rows_of(i)], scale_season(ckpt.config, ckpt.freq))  # no value: 0, 1
        means.append(own.mean[0])
        stds.append(own.std[0])
    return Scaler(mean=np.stack(means), std=np.stack(stds)), new


def forecast_frame(
    ckpt: Checkpoint, frame: SeriesFrame, scaler: Scaler, ahead: np.ndarray | None = None
) -> pd.DataFrame:
    """Every series' next `horizon` steps, with the validation fallback and the conformal intervals."""
    cfg = ckpt.config.model
    n_columns, n_past = len(ckpt.columns), len(ckpt.past_covs)
    offset = to_offset(ckpt.freq)
    lasts = frame.timestamps[frame.bounds[1:] - 1]
    ranges = [pd.date_range(last + offset, periods=cfg.horizon, freq=offset) for last in lasts]
    timestamps = ranges[0].append(ranges[1:]).rename(ckpt.time_col)
    n_inputs = n_columns + n_past + len(ckpt.future_covs) + len(ckpt.calendar)
    windows = torch.zeros(frame.n_ids, cfg.context_len + cfg.horizon, n_inputs)  # like a data window: L + H steps
    observed = torch.zeros(frame.n_ids, cfg.context_len + cfg.horizon, n_inputs, dtype=torch.bool)
    inputs = frame.inputs()  # (n_rows, C + n_covariates), NaN where missing
    for i in range(frame.n_ids):
        rows = frame.rows_of(i)
        recent = inputs[rows][-cfg.context_len :]  # (<= L, C + n_covariates)
        scaled = np.nan_to_num(scaler.transform(recent, i))
        start = cfg.context_len - len(recent)
        n_scaled = scaled.shape[1]
        windows[i, start : cfg.context_len, :n_scaled] = torch.from_numpy(scaled)
        observed[i, start : cfg.context_len, :n_scaled] = torch.from_numpy(~np.isnan(recent))
        if ahead is not None:  # the data's known-future covariates over the horizon, scaled like their history
            future_scaled = (ahead[i] - scaler.mean[i, n_columns + n_past :]) / scaler.std[i, n_columns + n_past :]
            windows[i, cfg.context_len :, n_columns + n_past : n_scaled] = torch.from_numpy(future_scaled)
        if ckpt.calendar:
            stamps = frame.timestamps[rows][-cfg.context_len :].append(ranges[i])
            features = calendar_features(stamps, ckpt.freq, ckpt.config.data.calendar, cfg.cycle)
            windows[i, start:, n_scaled:] = torch.from_numpy(features)
    layout = Layout(ckpt.columns, ckpt.past_covs, ckpt.future_covs, ckpt.calendar)
    split = Windows(windows, observed, layout).split(cfg.context_len)
    model = ckpt.build_model()
    forecasts = all_forecasts(model, split, season_for(ckpt.freq, cfg.context_len))
    known = {key: i for i, key in enumerate(ckpt.series)}  # a series not in training: its model forecast
    choice = tuple(ckpt.fallback[known[key]] if key in known and ckpt.fallback else ("model",) * n_columns
                   for key in frame.keys)  # fmt: skip
    scaled = apply(choice, forecasts, np.arange(frame.n_ids)).numpy()  # (S, H, C): the choice made on validation
    quantiles = shipped_quantiles(model, split, forecasts, choice, np.arange(frame.n_ids))  # (S, H, C, Q) or None
    if quantiles is not None:
        pairs = quantile_pairs(ckpt.config.train.quantiles)
        quantiles = adjust_quantiles(quantiles, ckpt.quantile_adjust, pairs).numpy()
    ids = np.arange(frame.n_ids)[:, None]  # (S, 1): each row's series, for the scaler
    target_scaler = Scaler(scaler.mean[:, :n_columns], scaler.std[:, :n_columns])
    point = target_scaler.inverse(scaled, ids)
    widths = ckpt.interval_half_widths(split)  # (n_levels, S or 1, H, C), scaled
    bands = [
        (label(level), target_scaler.inverse(scaled - width, ids), target_scaler.inverse(scaled + width, ids))
        for level, width in zip(ckpt.interval_levels, () if widths is None else widths, strict=True)
    ]
    columns = {}
    for j, name in enumerate(ckpt.columns):  # each target, then its intervals: OT, OT_lower_80, OT_upper_80, ...
        columns[name] = point[..., j].reshape(-1)  # (S * H,) series after series
        for tag, lower, upper in bands:
            columns[f"{name}_lower_{tag}"] = lower[..., j].reshape(-1)
            columns[f"{name}_upper_{tag}"] = upper[..., j].reshape(-1)
        for k, level in enumerate(sorted(ckpt.config.train.quantiles) if quantiles is not None else ()):
            columns[f"{name}_q{level:g}"] = target_scaler.inverse(quantiles[..., k], ids)[..., j].reshape(-1)
    if not ckpt.id_cols:
        return pd.DataFrame(columns, index=timestamps)
    ids_frame = pd.DataFrame(
        np.repeat(np.array(frame.keys, dtype=object), cfg.horizon, axis=0), columns=list(ckpt.id_cols)
    )
    return pd.concat([ids_frame, pd.DataFrame({ckpt.time_col: timestamps}), pd.DataFrame(columns)], axis=1)


PLOTTED_SERIES = 4  # long format: the forecast plot shows the first few series


def _plotted(ckpt: Checkpoint, frame: SeriesFrame, forecast: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The recent history (4 horizons) and forecast to plot, indexed by timestamp: every target of a wide
    file, or the first target of the first few series of a long one (one column per series)."""
    horizon = ckpt.config.model.horizon
    if not ckpt.id_cols:
        history = pd.DataFrame(frame.values, index=frame.timestamps, columns=list(frame.columns))
        return history.iloc[-4 * horizon :], forecast
    target = ckpt.columns[0]
    histories, futures = [], []
    for i in range(min(PLOTTED_SERIES, frame.n_ids)):
        name = frame.names[i]
        rows = frame.rows_of(i)
        values = np.where(frame.observed[rows, 0], frame.values[rows, 0], np.nan)[-4 * horizon :]
        histories.append(pd.Series(values, index=frame.timestamps[rows][-4 * horizon :], name=name))
        part = forecast.iloc[i * horizon : (i + 1) * horizon].set_index(ckpt.time_col)
        bounds = {c: c.replace(target, name, 1) for c in part.columns if c.startswith(f"{target}_")}
        futures.append(part[[target, *bounds]].rename(columns={target: name, **bounds}))
    return pd.concat(histories, axis=1, sort=True), pd.concat(futures, axis=1, sort=True)
