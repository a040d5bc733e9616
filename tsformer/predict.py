"""`forecast_after(predictor, data)`: the next `horizon` steps after each series' last value, in the data's units."""

from __future__ import annotations

import contextlib
import dataclasses
import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from pandas.tseries.frequencies import to_offset

from tsformer.data import Scaler, SeriesFrame, Source, forecast_index, read_series
from tsformer.data.prepare import scale_season
from tsformer.data.static import unseen_note
from tsformer.data.timestamps import TimeNotation
from tsformer.errors import DataError
from tsformer.fallback import not_the_model
from tsformer.files import atomic_open
from tsformer.intervals import label
from tsformer.results import Forecasts

if TYPE_CHECKING:
    from tsformer.predictor import Predictor

PLOTTED_SERIES = 4  # long format: the forecast plot shows the first few series


@dataclass(frozen=True)
class Forecast:
    """The forecast table: the id columns (long format), the time column, then per target its forecast, its
    interval bounds and its quantiles; and the notes on how the data was read."""

    frame: pd.DataFrame
    notes: tuple[str, ...]  # how the data was read (date order, frequency, new series), for the user
    time_col: str = ""
    time_notation: TimeNotation = TimeNotation()  # how the data wrote its times: the CSV writes them alike
    history: SeriesFrame | None = None  # the rows forecast from (`to_last_value`): the plot shows them

    def to_csv(self) -> str:
        """The table as CSV, its times in the data's notation (2023-05 stays 2023-05, epochs stay epochs)."""
        times = self.time_notation.write(pd.DatetimeIndex(self.frame[self.time_col]))
        return self.frame.assign(**{self.time_col: times}).to_csv(index=False)


def forecast_after(
    predictor: Predictor,
    source: Source | SeriesFrame,
    future: Source | None = None,
    static: Source | None = None,
) -> Forecast:
    """Forecast after each series' last row with a target value (`to_last_value`) of `source` (a path, a
    DataFrame, or a frame already read); a history shorter than context_len is left-padded and masked. A model
    with known-future covariates reads their next `horizon` values of each series from `future`; `static` gives
    the static covariates of series it was not trained on."""
    read = source if isinstance(source, SeriesFrame) else predictor.read_frame(source, static)
    frame = to_last_value(read, predictor.config.data.fill)
    ahead = rows_ahead(predictor, read, frame) if future is None else None
    if ahead is None:
        ahead, notes, kept = read_future(predictor, frame, future)
        frame = frame if kept is None else frame.of_series(kept)
    else:
        notes = (AHEAD_NOTE,)
    frame = dataclasses.replace(frame, notes=(*frame.notes, *notes))
    shipped, timestamps, notes = shipped_after(predictor, frame, ahead)
    table = _table(predictor, frame, shipped, timestamps)
    return Forecast(table, notes, predictor.time_col, frame.time_notation, frame)


def to_last_value(frame: SeriesFrame, fill: str) -> SeriesFrame:
    """`frame` through each series' last row with a target value (`SeriesFrame.through_last_value`), with a note
    where rows were left out: the forecast starts after the last value, never after rows nothing was observed in."""
    kept = frame.through_last_value(fill)
    dropped = frame.lengths - kept.lengths  # (n_ids,)
    if not dropped.any():
        return frame
    if frame.is_panel:
        first = int(np.flatnonzero(dropped)[0])
        note = (
            f"the last rows of {int((dropped > 0).sum())} series hold no target value ({dropped[first]} of "
            f"{frame.names[first]!r}), so each forecast starts after its series' last row with one"
        )
    else:
        last = frame.time_notation.write(kept.timestamps[-1:])[0]
        note = f"the last {dropped[0]} rows hold no target value, so the forecast starts after the last row with one"
        note += f" ({last})"
    cells = int((~frame.observed).sum() - (~kept.observed).sum())  # the blank cells of the rows left out
    if cells:  # the reader counted them among the missing cells
        note += f"; the {cells} blank cells of those rows are among the missing ones counted above"
    return dataclasses.replace(kept, notes=(*frame.notes, note))


def shipped_after(
    predictor: Predictor, frame: SeriesFrame, ahead: np.ndarray | None
) -> tuple[Forecasts, pd.DatetimeIndex, tuple[str, ...]]:
    """What `forecast_after` ships after each series' last row of `frame` (the known-future covariates of the
    next steps in `ahead`, (n_ids, horizon, n_future) or None), the forecast's timestamps, and the notes."""
    scaler, new_series = series_scaler(predictor, frame)
    notes = frame.notes
    if new_series:
        notes += (f"{new_series} series not in training; the global model forecasts each, scaled with its own history",)
    unseen = unseen_note(frame.static, predictor.layout.static_categorical, frame.names)
    notes += (unseen,) if unseen else ()
    notes += tuple(note for note in (_short_history_note(frame, predictor.context_len), _early_end_note(frame)) if note)
    index, timestamps = forecast_index(
        frame, ahead, predictor.layout, scaler, predictor.static_scale, predictor.context_len, predictor.horizon
    )
    known = {key: i for i, key in enumerate(predictor.series)}
    ids = np.array([known.get(key, -1) for key in frame.keys])  # -1: not trained on, the model forecasts it
    forecaster, passed_over = predictor.for_origins(frame)  # the final model, unless the data end before its rows
    shipped = forecaster.forecast(index.split(predictor.context_len), ids, window_scaler=scaler)
    naive = not_the_model(shipped.chosen, predictor.layout.targets, per_series=bool(predictor.id_cols))
    left_out = "" if predictor.calibration is None else predictor.calibration.note()
    below = below_zero_note(shipped, scaler.first(predictor.layout.n_targets), predictor)
    notes += tuple(note for note in (passed_over, naive, left_out, below) if note)
    return shipped, timestamps, notes


def _short_history_note(frame: SeriesFrame, context_len: int) -> str:
    """Where a series holds fewer rows than the model's context: its forecast reads them, padded before."""
    short = frame.lengths < context_len
    if not short.any():
        return ""
    if not frame.id_cols:
        return (
            f"the data hold {int(frame.lengths[0])} rows, fewer than the model's context of {context_len} steps: the "
            "forecast reads them with the missing steps before them masked (give more history where there is some)"
        )
    return (
        f"{int(short.sum())} series hold fewer rows than the model's context of {context_len} steps (the shortest "
        f"{int(frame.lengths.min())}): their forecasts read them with the missing steps before them masked"
    )


def _early_end_note(frame: SeriesFrame) -> str:
    """Where a panel's series end before its last time (a product no longer sold): each is forecast after its own
    last row, so its forecast's times lie before the others'."""
    if not frame.is_panel:
        return ""
    ends = frame.timestamps[frame.bounds[1:] - 1]  # (n_ids,) each series' last time
    early = np.flatnonzero(ends < ends.max())
    if not len(early):
        return ""
    first = early[np.argmin(ends[early])]
    written = frame.time_notation.write(ends[[first, int(np.argmax(ends))]])
    return (
        f"{len(early)} series end before the data's last time ({written[1]}), the earliest {frame.names[first]!r} "
        f"at {written[0]}: each is forecast after its own last row"
    )


def below_zero_note(shipped: Forecasts, targets: Scaler, predictor: Predictor) -> str:
    """Where an interval reaches below zero for a column that stayed above zero in the series' training rows, and
    data.floor left it unfloored (auto): how to floor it, if it cannot go negative. `targets`: each series'
    target statistics."""
    if predictor.config.data.floor != "auto" or targets.lowest is None or not shipped.levels:
        return ""
    level, lower, _ = max(shipped.bounds(), key=lambda bound: bound[0])  # the widest interval, (S, H, C)
    positive = np.nan_to_num(targets.lowest, nan=-1.0) > 0  # (S, C)
    below = (lower < 0).any(axis=1) & positive  # (S, C)
    if not below.any():
        return ""
    names = ", ".join(name for j, name in enumerate(predictor.layout.targets) if below[:, j].any())
    where = f"{int(below.sum())} series x columns ({names})" if predictor.id_cols else names
    return (
        f"{label(level)} % lower bounds go below zero for {where}, which stayed above zero in training; "
        "if they cannot go negative, train with --set data.floor=zero"
    )


def write_forecast(
    forecast: Forecast, predictor: Predictor, frame: SeriesFrame, out: Path | None, plot: Path | None
) -> None:
    """The forecast's CSV to `out` and its fan chart (with `frame`'s recent history) to `plot`, each renamed into
    place only after both were written."""
    with contextlib.ExitStack() as stack:
        if out is not None:
            stack.enter_context(atomic_open(out)).write(forecast.to_csv().encode("utf-8"))
        if plot is not None:
            from tsformer.plots import plot_forecast

            image = io.BytesIO()
            plot_forecast(*_plotted(predictor, frame, forecast.frame), image)
            stack.enter_context(atomic_open(plot)).write(image.getbuffer())


AHEAD_NOTE = (
    "the known-future covariates of the steps ahead were read from the data's rows after each series' last target "
    "value (--future gives them otherwise)"
)


def rows_ahead(predictor: Predictor, read: SeriesFrame, history: SeriesFrame) -> np.ndarray | None:
    """(n_ids, horizon, n_future) the known-future covariates of the `horizon` rows after each series' last target
    value where the data hold them there (`read`: the data as read; `history`: it through those last values), as
    long files often carry the covariates to come; None where the model reads none or some series lacks a value."""
    horizon = predictor.horizon
    if not predictor.layout.future or read.future is None or read.future_names != predictor.layout.future:
        return None
    after = history.lengths  # (n_ids,) each series' rows up to its last value: the rows ahead start there
    if (read.lengths - after < horizon).any():
        return None
    steps = read.bounds[:-1, None] + after[:, None] + np.arange(horizon)  # (n_ids, horizon) rows of `read`
    ahead = read.future[steps]  # (n_ids, horizon, n_future)
    return None if np.isnan(ahead).any() else ahead


def read_future(
    predictor: Predictor, history: SeriesFrame, future: Source | None
) -> tuple[np.ndarray | None, tuple[str, ...], np.ndarray | None]:
    """(n_kept, horizon, n_future) the known-future covariates of `future` (a CSV or DataFrame): the
    `horizon` steps after each series' last row with a target value (rows before and after them are not read);
    None when the model reads none from the data. The notes: the series `future` holds and the history does
    not, and those left out. And the series kept (indexes of `history`'s): None where every one is; a series
    that ended before the data's last time (a product no longer sold) with no rows in `future` is left out."""
    horizon, names = predictor.horizon, predictor.layout.future
    if not names:
        if future is not None:
            raise DataError(
                "the model reads no known-future covariate columns (trained without --future-cov); drop --future"
            )
        return None, (), None
    if future is None:
        raise DataError(
            f"the model reads the known-future covariates {', '.join(names)}; pass --future CSV with their "
            f"values for the {horizon} steps after each series' last target value (or end each series with "
            f"{horizon} rows that hold them and no target value)"
        )
    data_cfg = dataclasses.replace(
        predictor.config.data,
        path="",
        targets=names,
        time_col=predictor.time_col,
        id_cols=predictor.id_cols,
        past_covs=(),
        future_covs=(),
        static_covs=(),
        static_path="",
        fill="",
        sort=True,  # rows in any order, as the history's
    )
    where = "the future DataFrame" if isinstance(future, pd.DataFrame) else f"--future {future}"
    try:
        frame = read_series(future, data_cfg, expected_freq=predictor.freq, expected_ids=predictor.id_cols)
    except DataError as exc:
        fixes = {"choose other --target columns": "correct it there", "choose numeric --target columns": "give numbers"}
        message = str(exc)
        for wrong, right in fixes.items():  # the reader speaks of targets; here its columns are covariates
            message = message.replace(wrong, right)
        raise DataError(f"{where}: {message.replace('target column', 'covariate')}") from None
    if (frame.timestamps.tz is None) != (history.timestamps.tz is None):
        stated, data = ("with", "without") if history.timestamps.tz is None else ("without", "with")
        raise DataError(
            f"{where} writes its timestamps {stated} UTC offsets and the data {data}; write both alike (offsets such "
            "as +01:00 in each, or in neither)"
        )
    rows = {key: i for i, key in enumerate(frame.keys)}
    known = set(history.keys)
    others = [key for key in frame.keys if key not in known]  # series the data does not hold
    offset = to_offset(predictor.freq)
    latest = history.timestamps.max()  # the data's last time: a series whose last row is before it ended early
    lasts = history.timestamps[history.bounds[1:] - 1]  # (n_ids,) each series' last time
    absent = np.array([key not in rows for key in history.keys])
    ended = absent & (lasts < latest)  # no longer forecast: nothing ahead of them to read
    if (absent & ~ended).any():
        missing = np.flatnonzero(absent & ~ended)
        first = f"series {'/'.join(history.keys[missing[0]])!r}" if predictor.id_cols else "the forecast"
        start = history.time_notation.write(pd.DatetimeIndex([lasts[missing[0]] + offset]))[0]  # as the data does
        held = f" (it holds {_series_names(others)} that the data does not: are the ids written alike?)"
        if len(missing) == 1:
            wanted = f"{first}{held if others else ''}; give its next {horizon} steps from {start}"
        else:
            named = _series_names([history.keys[j] for j in missing])
            wanted = f"{named}{held if others else ''}; give each its next {horizon} steps ({first} from {start})"
        raise DataError(f"{where} has no rows for {wanted}")
    kept = np.flatnonzero(~ended)
    out = np.empty((len(kept), horizon, len(names)), dtype=np.float32)
    for row, i in enumerate(kept):
        key = history.keys[i]
        series = f"series {'/'.join(key)!r}" if predictor.id_cols else "the forecast"
        expected = lasts[i] + offset
        span = frame.rows_of(rows[key])
        first = span.start + int(frame.timestamps[span].searchsorted(expected))  # rows before it (history) unused
        if first + horizon > span.stop or frame.timestamps[first] != expected:
            raise DataError(
                f"{where} has {span.stop - span.start} rows from {frame.timestamps[span.start]} for {series}, "
                f"but needs the {horizon} steps from {expected} (after the history's last row with a target value)"
            )
        span = slice(first, first + horizon)  # the forecast's steps; later rows are not read
        missing = ~frame.observed[span]
        if missing.any():
            step, column = (int(k[0]) for k in np.nonzero(missing))
            raise DataError(
                f"{where} misses covariate values for {series}, {missing.sum()} of {missing.size} (the first: "
                f"{names[column]} at {history.time_notation.write(frame.timestamps[span][[step]])[0]}, a missing row "
                "or an empty or non-numeric cell); "
                "give every value"
            )
        out[row] = frame.values[span]
    notes = (f"{where} holds {_series_names(others)} that the data does not; their rows are not read",) * bool(others)
    if ended.any():
        notes += (
            f"{_series_names([history.keys[j] for j in np.flatnonzero(ended)])} end before the data's last time and "
            f"have no rows in {where}: left out of the forecast (give their next {horizon} steps there to forecast "
            "them)",
        )
    return out, notes, kept if ended.any() else None


def _series_names(keys: list[tuple[str, ...]]) -> str:
    """'1 series ('9/A1')' or '4 series ('9/A1', '9/A2', '9/B1', ...)'."""
    shown = ", ".join(repr("/".join(key)) for key in keys[:3])
    return f"{len(keys)} series ({shown}{', ...' if len(keys) > 3 else ''})"


def series_scaler(predictor: Predictor, frame: SeriesFrame) -> tuple[Scaler, int]:
    """Each series' scaler: the run's for a series it was trained on; for a new series (long format), the
    statistics of its own history, which all lies before the forecast origin. Returns it and the count of
    new series."""
    if not predictor.id_cols:
        return predictor.scaler, 0
    known = {key: i for i, key in enumerate(predictor.series)}
    rows, new = [], 0
    for i, key in enumerate(frame.keys):
        if key in known:
            rows.append(predictor.scaler.rows(slice(known[key], known[key] + 1)))
            continue
        new += 1
        rows.append(Scaler.fit(frame.inputs()[frame.rows_of(i)], scale_season(predictor.config, predictor.freq)))
    return Scaler.stack(rows), new


def _table(predictor: Predictor, frame: SeriesFrame, shipped: Forecasts, timestamps: pd.DatetimeIndex) -> pd.DataFrame:
    """Every series' next `horizon` steps: the forecast, its intervals and quantiles, in the data's units."""
    point = shipped.units(shipped.point)  # (S, H, C)
    bands = [(label(level), lower, upper) for level, lower, upper in shipped.bounds()]
    quantiles = None if shipped.quantiles is None else shipped.units(shipped.quantiles)  # (S, H, C, Q)
    targets = predictor.layout.targets
    columns = {}
    for j, name in enumerate(targets):  # each target, its bounds and quantiles, its forecaster: OT, OT_lower_80, ...
        columns[name] = point[..., j].reshape(-1)  # (S * H,) series after series
        for tag, lower, upper in bands:
            columns[f"{name}_lower_{tag}"] = lower[..., j].reshape(-1)
            columns[f"{name}_upper_{tag}"] = upper[..., j].reshape(-1)
        for k, level in enumerate(shipped.quantile_levels):
            columns[f"{name}_q{level:g}"] = quantiles[..., j, k].reshape(-1)
        forecaster = "forecaster" if len(targets) == 1 else f"{name}_forecaster"
        columns[forecaster] = np.repeat(shipped.chosen[:, j], predictor.horizon)  # the series' choice, every step
    time = pd.DataFrame({predictor.time_col: timestamps})
    if not predictor.id_cols:
        return pd.concat([time, pd.DataFrame(columns)], axis=1)
    ids = frame.ids_table(np.repeat(np.arange(frame.n_ids), predictor.horizon))  # typed as the data's
    return pd.concat([ids, time, pd.DataFrame(columns)], axis=1)


def _plotted(
    predictor: Predictor, frame: SeriesFrame, forecast: pd.DataFrame
) -> tuple[list[tuple[str, pd.Series, pd.DataFrame]], str]:
    """The panels of the forecast plot and its title: every target of a wide file, or the first target of
    the first PLOTTED_SERIES series of a long one, each with its last 4 horizons of history (its own dates)
    and its forecast with the interval bounds and what made it (columns forecast, lower_80, upper_80, ...,
    forecaster)."""
    horizon, time_col, targets = predictor.horizon, predictor.time_col, predictor.layout.targets
    picked = [(j, 0) for j in range(len(targets))] if not predictor.id_cols else [
        (0, i) for i in range(min(PLOTTED_SERIES, frame.n_ids))
    ]  # fmt: skip
    panels = []
    for j, i in picked:
        name = targets[j]
        rows = frame.rows_of(i)
        values = np.where(frame.observed[rows, j], frame.values[rows, j], np.nan)[-4 * horizon :]
        history = pd.Series(values, index=frame.timestamps[rows][-4 * horizon :])
        part = forecast.iloc[i * horizon : (i + 1) * horizon].set_index(time_col)
        bounds = {
            c: c.removeprefix(f"{name}_") for c in part.columns if c.startswith((f"{name}_lower_", f"{name}_upper_"))
        }
        made_by = f"{name}_forecaster" if f"{name}_forecaster" in part else "forecaster"
        ahead = part[[name, *bounds, made_by]].rename(columns={name: "forecast", made_by: "forecaster", **bounds})
        panels.append((f"{name} of {frame.names[i]}" if predictor.id_cols else name, history, ahead))
    if not predictor.id_cols:
        return panels, f"the next {horizon} steps of each target"
    return (
        panels,
        f"the next {horizon} steps of the first {len(panels)} of {frame.n_ids} series in the file ({targets[0]})",
    )
