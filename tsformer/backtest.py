"""`backtest(predictor, data)`: how the model would have done at rolling origins in the past.

Each origin is a cut in every series: the forecast reads only the steps before it and forecasts the
`horizon` steps from it, which are then scored against the truth, beside the naive forecasters on
the same cuts. Origins step back from the end of each series (or forward from `start`). Without
refitting, an origin must come after the run's training and validation targets (validation chose the
epoch, the fallback and the intervals); `tsformer.runs.refit_backtest` trains a new model (scaler
included) at every origin on the steps before it only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from tsformer.data import Prepared, SeriesFrame, WindowIndex
from tsformer.data.timestamps import TimeNotation
from tsformer.errors import ConfigError, DataError
from tsformer.fallback import not_the_model
from tsformer.files import atomic_open
from tsformer.intervals import label
from tsformer.metrics import score
from tsformer.results import Forecasts

if TYPE_CHECKING:
    from tsformer.predictor import Predictor


@dataclass(frozen=True)
class BacktestResult:
    forecasts: pd.DataFrame  # one row per (origin, series, step, target column): forecasts, intervals and truth
    summary: pd.DataFrame  # one row per (origin, forecaster) and per forecaster over every origin ("all")
    time_col: str  # the forecasts' time column, beside "origin" (the last step each forecast read)
    time_notation: TimeNotation  # how the data wrote its times, which the CSV writes both in
    notes: tuple[str, ...] = ()

    def to_csv(self) -> str:
        """The forecasts as CSV, their origin and time in the data's time notation."""
        columns = ("origin", self.time_col)
        times = {col: self.time_notation.write(pd.DatetimeIndex(self.forecasts[col])) for col in columns}
        return self.forecasts.assign(**times).to_csv(index=False)


def first_rows(frame: SeriesFrame, start: str | pd.Timestamp | None) -> np.ndarray | None:
    """(n_ids,) the row of each series' first step at or after `start` (None without one; a time without an
    offset is read in the data's zone)."""
    if start is None:
        return None
    try:
        when = pd.Timestamp(start)
    except ValueError:
        raise DataError(
            f"--start {start!r} is not a date; write it like the timestamps, e.g. {frame.timestamps[0]}"
        ) from None
    if when.tz is None and frame.timestamps.tz is not None:  # a plain date: in the data's own zone
        try:
            when = when.tz_localize(frame.timestamps.tz)
        except ValueError:  # a local time daylight saving skips or repeats
            raise DataError(
                f"--start {start!r} is skipped or repeated by the clock change in {frame.timestamps.tz}; give it "
                f"with its UTC offset, e.g. {frame.timestamps[0]}"
            ) from None
    if when.tz is not None and frame.timestamps.tz is None:
        raise DataError(
            f"--start {start!r} and the timestamps differ in having a UTC offset; write it like them, e.g. "
            f"{frame.timestamps[0]}"
        )
    return np.array([frame.timestamps[frame.rows_of(i)].searchsorted(when) for i in range(frame.n_ids)])


def origins_that_fit(
    frame: SeriesFrame, after: np.ndarray, horizon: int, step: int, first: np.ndarray | None
) -> np.ndarray:
    """(n_ids,) how many origins `step` apart fit in each series between row `after` (n_ids,) and its end
    (stepping back from the end, or forward from each series' `first` row, `first_rows`); 0 where none does."""
    after = np.maximum(after, 1)  # an origin reads at least one row before it
    lowest = after if first is None else np.where(first >= after, first, np.iinfo(np.int64).max)
    room = frame.lengths - horizon - lowest  # rows from the lowest allowed origin to the last possible one
    return np.maximum(0, room // step + 1)


def _origin_counts(
    frame: SeriesFrame, val_end: np.ndarray, horizon: int, step: int, start: str | None
) -> tuple[np.ndarray, np.ndarray]:
    """(n_ids,) how many origins fit in each series, and the series backtested: every series with room for an
    origin after its validation (the others are left out, named in a note). A --start inside a backtested
    series' training or validation, or too late for a horizon before its end, is refused."""
    after_validation = origins_that_fit(frame, val_end, horizon, step, None)
    short = after_validation == 0  # no room after validation
    series = np.flatnonzero(~short)
    if not len(series):
        raise DataError(
            f"no series has an origin with {horizon} steps after it past the run's validation split: backtest "
            "longer data, or retrain at each origin with --refit"
        )
    if start is None:
        return after_validation, series
    first = first_rows(frame, start)
    each = origins_that_fit(frame, val_end, horizon, step, first)
    earliest = np.maximum(val_end, 1)  # (n_ids,) each series' first row an origin may take
    inside, late = ~short & (first < earliest), ~short & (each == 0)
    if inside.any() or late.any():
        i = int(np.flatnonzero(inside | late)[0])
        why = "falls inside the data the model was trained or selected on" if inside[i] else (
            f"leaves fewer than {horizon} steps before the end")  # fmt: skip
        whose = f" for series {frame.names[i]!r}" if frame.id_cols else ""
        refit = "; or retrain at each origin with --refit" if inside[i] else ""
        raise DataError(f"--start {start} {why}{whose}; {_starts_allowed(frame, earliest, horizon, series)}{refit}")
    return each, series


def _starts_allowed(frame: SeriesFrame, earliest: np.ndarray, horizon: int, series: np.ndarray) -> str:
    """The --start dates every backtested series (`series`) takes: from the latest of their first origins
    (`earliest` (n_ids,) rows, after validation) to the earliest of their last ones (a horizon before each end), in
    the data's time notation."""
    bounds = frame.bounds[series]
    firsts = frame.timestamps[bounds + earliest[series]]
    lasts = frame.timestamps[bounds + frame.lengths[series] - horizon]
    if firsts.max() > lasts.min():
        return (
            "no one --start fits every series (their test stretches do not overlap); backtest without --start, "
            "from each series' own origins"
        )
    written = frame.time_notation.write(pd.DatetimeIndex([firsts.max(), lasts.min()]))
    return f"give one from {written[0]} to {written[1]}"


def origin_rows(
    frame: SeriesFrame, horizon: int, windows: int, step: int, start: str | None, series: np.ndarray | None = None
) -> np.ndarray:
    """(n_series, windows) each origin's row within each of `series` (indexes; None: every series): the first
    step forecast from it.

    Without `start` the last origin forecasts each series' last `horizon` steps and the others step
    back by `step`; with `start`, origins step forward from the first step at or after it."""
    series = np.arange(frame.n_ids) if series is None else series
    lengths = frame.lengths[series]
    rows, bad = _rows_that_fit(frame, horizon, windows, step, start, series)
    if bad.any():
        i = int(np.flatnonzero(bad.any(axis=1))[0])
        where = f"series {frame.names[series[i]]!r} has" if frame.id_cols else "the data have"
        raise DataError(
            f"{windows} origins {step} steps apart do not fit: {where} {lengths[i]} rows, and every origin needs "
            f"history before it and {horizon} steps after it; ask for fewer --windows or a smaller --step"
        )
    return rows


def series_with_origins(frame: SeriesFrame, horizon: int, windows: int, step: int, start: str | None) -> np.ndarray:
    """The series (indexes) whose rows hold every origin `origin_rows` would give them; every series where none
    does (so that `origin_rows` names what is wrong)."""
    _, bad = _rows_that_fit(frame, horizon, windows, step, start, np.arange(frame.n_ids))
    fitting = np.flatnonzero(~bad.any(axis=1))
    return fitting if len(fitting) else np.arange(frame.n_ids)


def _rows_that_fit(
    frame: SeriesFrame, horizon: int, windows: int, step: int, start: str | None, series: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(n_series, windows) each origin's row within each of `series`, and whether it lacks history before it or
    `horizon` steps after it."""
    lengths = frame.lengths[series]
    if start is None:
        last = lengths - horizon  # (n_series,)
        rows = last[:, None] - step * np.arange(windows)[::-1][None, :]
    else:
        rows = first_rows(frame, start)[series, None] + step * np.arange(windows)[None, :]
    return rows, (rows < 1) | (rows + horizon > lengths[:, None])


def backtest(
    predictor: Predictor, data: Prepared, windows: int | None = None, step: int = 0, start: str | None = None
) -> BacktestResult:
    """Forecast at `windows` origins `step` apart (default: the horizon) with the predictor (its model, fallback
    and intervals) on `data` (read by `Predictor.read`), and score each. Every origin must come after the run's
    validation (which chose the epoch, the fallback and the intervals); `windows` None takes all that fit."""
    horizon, frame = predictor.horizon, data.frame
    check_origins(windows, step)
    step = step or horizon
    each, series = _origin_counts(frame, data.borders.val_end, horizon, step, start)
    fit = int(each[series].min())
    if windows is not None and windows > fit:
        least = int(series[np.argmin(each[series])])
        where = f" in series {frame.names[least]!r}" if predictor.id_cols else ""
        if start is None:
            reach = "reach inside the data the model was trained or selected on (its training and validation targets)"
            fits = f"{fit} fit after them{where}"
        else:
            reach, fits = f"from --start {start} run past the data's end", f"{fit} fit{where}"
        refit = ", or retrain at each origin with --refit" if start is None else ""  # it cannot add later rows
        raise DataError(
            f"{windows} origins {step} steps apart {reach}; {fits}: ask for --windows {fit} or fewer or a smaller "
            f"--step{refit}"
        )
    notes = ()
    if len(series) < frame.n_ids:
        left_out = ", ".join(repr(frame.names[i]) for i in np.setdiff1d(np.arange(frame.n_ids), series)[:5])
        notes += (
            f"{frame.n_ids - len(series)} of {frame.n_ids} series left out: too short for an origin after their "
            f"validation and {horizon} steps after it ({left_out}{', ...' * (frame.n_ids - len(series) > 5)})",
        )
    if windows is None:
        windows = fit
        notes += (f"{fit} origin{'s' * (fit != 1)}, {step} steps apart: all that fit after the run's validation "
                  "split (--windows N for fewer)",)  # fmt: skip
    rows = origin_rows(frame, horizon, windows, step, start, series)
    if (rows < data.borders.val_end[series, None]).any():  # windows <= fit keeps every origin after validation
        raise ValueError("a backtest origin lies inside the data the model was trained or selected on")
    result = score_origins(predictor, data, rows, series)
    return dataclasses.replace(result, notes=notes + result.notes)


def check_origins(windows: int | None, step: int) -> None:
    """A ConfigError unless `windows` (None: all that fit) is at least 1 and `step` at least 0 (0: the horizon)."""
    if windows is not None and windows < 1:
        raise ConfigError(f"--windows must be at least 1, got {windows}")
    if step < 0:
        raise ConfigError(f"--step must be 0 (the horizon) or more, got {step}")


def origin_windows(data: Prepared, rows: np.ndarray, series: np.ndarray | None = None) -> WindowIndex:
    """The windows whose first target is at `rows` (n_series, n_origins) of each of `series` (indexes; None:
    every series), series after series."""
    bounds = data.frame.bounds[:-1] if series is None else data.frame.bounds[series]
    floors = np.repeat(bounds, rows.shape[1])  # (n_series * n_origins,)
    starts = floors + rows.reshape(-1)
    return dataclasses.replace(
        data.split_windows("test"), starts=torch.from_numpy(starts), floors=torch.from_numpy(floors)
    )


def score_origins(
    predictor: Predictor, data: Prepared, rows: np.ndarray, series: np.ndarray | None = None
) -> BacktestResult:
    """Forecast and score the windows whose first target is at `rows` (n_series, n_origins) of each of `series`
    (indexes; None: every series)."""
    frame = data.frame
    n_series, n_origins = rows.shape
    series = np.arange(n_series) if series is None else series
    index = origin_windows(data, rows, series)
    starts = index.starts.numpy()
    windows = index.all().split(predictor.context_len)
    ids = np.repeat(series, n_origins)  # (N,) each window's series
    shipped = predictor.forecast(windows, ids)
    forecasts = {"model": shipped.point, **{k: v for k, v in shipped.each.items() if k != "model"}}  # (N, H, C)
    folds = np.tile(np.arange(n_origins), n_series)  # (N,)
    mean, std, scale = shipped.mean, shipped.std, data.mase_scales(predictor.season)[ids]  # (N, C) each
    truth = windows.target.numpy()
    observed = None if windows.target_observed is None else windows.target_observed.numpy()
    cutoffs = frame.timestamps[starts - 1]  # the last step each forecast may read
    summary = []
    for fold in range(n_origins):
        keep = folds == fold
        for name in forecasts:
            s = score(
                forecasts[name].numpy()[keep],
                truth[keep],
                mean[keep],
                std[keep],
                frame.columns,
                scale[keep],
                None if observed is None else observed[keep],
            )["mean"]
            summary.append({"origin": _origin_label(cutoffs[keep], frame.time_notation), "forecaster": name, **s})
    for name in forecasts:
        s = score(forecasts[name].numpy(), truth, mean, std, frame.columns, scale, observed)["mean"]
        summary.append({"origin": "all", "forecaster": name, **s})
    table = _long_table(predictor, frame, shipped, truth, observed, starts, ids, cutoffs)
    per_series = shipped.chosen[::n_origins]  # (n_series, C): a series' origins share its forecaster
    shipped_by = not_the_model(per_series, predictor.layout.targets, per_series=bool(predictor.id_cols))
    notes = (shipped_by,) if shipped_by else ()
    return BacktestResult(table, pd.DataFrame(summary), predictor.time_col, frame.time_notation, notes)


def _origin_label(cutoffs: pd.DatetimeIndex, notation: TimeNotation) -> str:
    """A fold's origin: the last step its forecasts may read, or the span of those of its series when
    they differ (series that end at different times); in the data's time notation."""
    first, last = (str(t) for t in notation.write(pd.DatetimeIndex([cutoffs.min(), cutoffs.max()])))
    return first if first == last else f"{first} to {last}"


def _long_table(predictor, frame, shipped: Forecasts, truth, observed, starts, ids, cutoffs) -> pd.DataFrame:
    """One row per origin, series, step and target column, in the data's units."""
    horizon, n_targets = truth.shape[1], truth.shape[2]
    n = len(starts)
    # timestamps, which the CSV writes in the data's notation (BacktestResult.to_csv)
    columns: dict[str, np.ndarray] = {"origin": cutoffs.repeat(horizon * n_targets)}
    if predictor.id_cols:
        typed = frame.ids_table(np.repeat(ids, horizon * n_targets))  # each row's series' ids, as the data typed them
        columns |= {name: typed[name] for name in predictor.id_cols}
    steps = (starts[:, None] + np.arange(horizon)[None, :]).reshape(-1)  # (N * H,)
    columns[predictor.time_col] = frame.timestamps[steps].repeat(n_targets)
    columns["target"] = np.tile(np.array(frame.columns, dtype=object), n * horizon)
    columns["forecast"] = shipped.units(shipped.point).reshape(-1)
    # what made each row's forecast: its series and column's forecaster, (N, C) -> every step's (N * H * C,)
    columns["forecaster"] = np.repeat(shipped.chosen[:, None, :], horizon, axis=1).reshape(-1)
    for level, lower, upper in shipped.bounds():
        columns[f"lower_{label(level)}"] = lower.reshape(-1)
        columns[f"upper_{label(level)}"] = upper.reshape(-1)
    for name, forecast in shipped.each.items():
        if name != "model":
            columns[name] = shipped.units(forecast).reshape(-1)
    truth_units = shipped.units(truth).reshape(-1)  # the data's values, back from scaled
    if observed is not None:
        truth_units = np.where(observed.reshape(-1), truth_units, np.nan)
    columns["truth"] = truth_units
    return pd.DataFrame(columns)


def write_backtest(result: BacktestResult, out: Path | None, plot: Path | None) -> None:
    """The long CSV and the error-by-origin plot, each renamed into place only when both were written."""
    with contextlib.ExitStack() as stack:
        if out is not None:
            stack.enter_context(atomic_open(out)).write(result.to_csv().encode("utf-8"))
        if plot is not None:
            from tsformer.plots import plot_backtest

            image = io.BytesIO()
            plot_backtest(result.summary[result.summary.origin != "all"], image)
            stack.enter_context(atomic_open(plot)).write(image.getbuffer())


def format_summary(result: BacktestResult) -> str:
    """Per origin: the model's MAE (CSV units) and MASE beside repeat-last's and seasonal naive's MASE (every
    candidate's scores are in the summary table); then overall."""
    table = result.summary.pivot_table(index="origin", columns="forecaster", values="mase", sort=False)
    mae = result.summary.pivot_table(index="origin", columns="forecaster", values="mae_original", sort=False)
    width = max(26, *(len(origin) + 2 for origin in table.index))  # a span of origins is longer than one date
    lines = [
        f"{'origin (last step read)':<{width}}{'model MAE':>12}{'MASE':>8}{'repeat-last':>13}{'seasonal naive':>16}"
        "   (MASE; MAE in the CSV's units)"
    ]
    for origin in table.index:
        lines.append(
            f"{origin:<{width}}{mae.loc[origin, 'model']:>12.4g}{table.loc[origin, 'model']:>8.3f}"
            f"{table.loc[origin, 'repeat_last']:>13.3f}{table.loc[origin, 'seasonal_naive']:>16.3f}"
        )
    return "\n".join(lines)
