"""From a series frame to scaled inputs by role and split borders: the explicit steps of training's data.

`choices.resolve_from_data` chooses the automatic settings from the data (the result is stored in the run);
`prepare` splits each series, fits the train-only scaler and scales (training); `scale_inputs` is the one
scaling path, used by `prepare`, by a trained predictor reading data (`Predictor.read`), and by
`forecast_index` for the window after each series' end.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from pandas.tseries.frequencies import to_offset

from tsformer.config import Config
from tsformer.data.calendar import calendar_features, calendar_names, cycle_phase
from tsformer.data.choices import choice_split, resolve_from_data
from tsformer.data.loader import SeriesFrame, Source, read_series, require_values, rows_not_lines
from tsformer.data.reading import read_as_training_rows_say
from tsformer.data.split import (
    Scaler,
    SplitBorders,
    panel_min_history,
    split_borders,
    val_horizons,
    window_counts,
    window_target_starts,
)
from tsformer.data.static import StaticScale, encode_static, static_roles, unseen_note
from tsformer.data.windows import SeriesInputs, WindowIndex
from tsformer.errors import ConfigError, DataError
from tsformer.layout import Layout
from tsformer.metrics import mase_scale, season_length


@dataclass(frozen=True)
class Prepared:
    """Series read, split and scaled: what training, evaluation, backtests and the data checks read."""

    config: Config  # resolved: context_len and patch_len chosen
    frame: SeriesFrame
    borders: SplitBorders
    scaler: Scaler  # (n_ids, len(layout.scaled)) statistics of each series' training rows
    layout: Layout
    static_scale: StaticScale | None  # of the numeric static covariates; None without any
    inputs: SeriesInputs  # the scaled rows by role
    fingerprint: dict[str, str | int]  # what a resumed run checks it still reads: see `data_fingerprint`
    notes: tuple[str, ...]  # how the data was read and what was chosen, for the user
    given: Config | None = None  # training's config as given, before the automatic settings; None: a run's data

    def min_history(self, split: str) -> int:
        """Steps of its series a window needs before its first target: the whole context for a wide file;
        in a panel, training windows need min(context_len, horizon) (shorter ones are left-padded) and
        validation and test windows one step, so every series with a history is scored."""
        context_len, horizon = self.config.model.context_len, self.config.model.horizon
        return panel_min_history(split, context_len, horizon) if self.frame.id_cols else context_len

    def target_starts(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """Each window's first target row and its series' first row, (n_windows,) each."""
        return window_target_starts(
            split, self.borders, self.frame.bounds, self.min_history(split), self.config.model.horizon
        )

    def windows(self, split: str) -> torch.Tensor:
        """Every window's targets in `split`, (n_windows, context_len + horizon, C)."""
        return self.split_windows(split).all().target

    def observed_windows(self, split: str) -> torch.Tensor | None:
        """Their observed mask, same shape; None: every cell observed."""
        return self.split_windows(split).all().observed

    def mase_scales(self, season: int, split: str = "test") -> np.ndarray:
        """(n_ids, C) each series' MASE denominator for windows of `split` (test, or the backtest's origins after
        it: "test"; "val"): the seasonal-naive MAE on its training rows, in its units; where that is undefined
        (no pair to difference, as in a series too short to train on, or a constant stretch), for test windows on
        its rows before the test split (training and validation, before every window scored); else NaN."""
        frame, borders = self.frame, self.borders
        scales = []
        for i in range(frame.n_ids):
            rows = frame.values[frame.rows_of(i)]
            scale = mase_scale(rows[: borders.train_end[i]], season)
            if split == "test" and np.isnan(scale).any():
                scale = np.where(np.isnan(scale), mase_scale(rows[: borders.val_end[i]], season), scale)
            scales.append(scale)
        return np.stack(scales)

    def split_windows(self, split: str, stride: int = 1) -> WindowIndex:
        """Every `stride`-th window of `split` (lazily: `take` or `all` gathers them)."""
        starts, floors = self.target_starts(split)
        model = self.config.model
        index = WindowIndex(
            self.inputs, torch.from_numpy(starts), torch.from_numpy(floors), model.context_len, model.horizon
        )
        return index.every(stride) if stride > 1 else index


def training_data(cfg: Config, source: Source | None = None, static: Source | None = None) -> Prepared:
    """Training's data in its steps: read `source` (a path or DataFrame; default cfg.data.path), check how it
    was read against its training rows (`reading`), choose the automatic settings, prepare."""
    if source is None and not cfg.data.path:
        raise DataError("no data given; pass a CSV path or a DataFrame, or set data.path in the config")
    if isinstance(source, SeriesFrame):  # read already (the command line reads before it loads torch)
        frame = source
    else:
        frame = read_series(cfg.data.path if source is None else source, cfg.data, static=static)
    try:  # how the file reads first: a series that a later row made up is named as such, not as one without values
        frame = read_as_training_rows_say(frame, cfg, choice_split(cfg, frame)[1])
    except DataError as exc:  # a DataFrame's rows are named as df.iloc numbers them, not as a file's lines
        raise DataError(rows_not_lines(str(exc))) if isinstance(source, pd.DataFrame) else exc from None
    require_values(frame, cfg.data.fill)
    resolved, notes = resolve_from_data(cfg, frame)
    return dataclasses.replace(prepare(frame, resolved, frame.notes + notes), given=cfg)


def prepare(frame: SeriesFrame, cfg: Config, notes: tuple[str, ...] | None = None) -> Prepared:
    """Training: split each series of `frame`, fit the train-only scaler (and the scale of the numeric static
    covariates), and scale. `cfg` has its automatic settings chosen (`choices.resolve_from_data`); `notes` are
    those so far for the user (default: the frame's)."""
    unresolved = cfg.data.calendar is None or cfg.model.cycle is None or cfg.train.loss == "auto"
    if not cfg.model.resolved or unresolved or not cfg.train.epochs:
        raise ConfigError("the automatic settings must be chosen first (data.resolve_from_data)")
    notes = frame.notes if notes is None else notes
    if frame.id_cols and frame.n_ids == 1:  # the field's examples ship one series in long format
        columns = ", ".join(map(repr, frame.id_cols))
        notes += (
            f"id column{'s' * (len(frame.id_cols) > 1)} {columns} hold{'s' * (len(frame.id_cols) == 1)} one value "
            f"({frame.names[0]!r}) on every row: read as one series",
        )
    context_len, horizon, panel = cfg.model.context_len, cfg.model.horizon, bool(frame.id_cols)
    train_history = panel_min_history("train", context_len, horizon) if panel else context_len
    borders = split_borders(cfg.data, frame, context_len, horizon, min_history=train_history)
    if panel:
        notes += (_split_note(cfg, frame, borders, train_history),)
    if cfg.data.floor == "zero":
        require_non_negative(frame)
    scaler, notes = fit_scaler(frame, borders, notes, scale_season(cfg, frame.freq))
    trained = existing_by_training_end(frame, borders)  # (n_ids,) whose statics training may read
    numeric, categorical = static_roles(frame.static, trained) if frame.static is not None else ((), ())
    layout = Layout(
        frame.columns,
        frame.past_names,
        frame.future_names,
        calendar_names(frame.freq, cfg.data.calendar),
        cfg.model.cycle,
        numeric,
        categorical,
    )
    static_scale = StaticScale.fit(frame.static, numeric, trained) if numeric else None
    unseen = unseen_note(frame.static, categorical, frame.names)
    notes += (unseen,) if unseen else ()
    return Prepared(
        config=cfg,
        frame=frame,
        borders=borders,
        scaler=scaler,
        layout=layout,
        static_scale=static_scale,
        inputs=scale_inputs(frame, layout, scaler, static_scale),
        fingerprint=data_fingerprint(frame),
        notes=notes,
    )


def existing_by_training_end(frame: SeriesFrame, borders: SplitBorders) -> np.ndarray:
    """(n_ids,) bool: the series whose first row is no later than the last training row of any series, so they
    existed when training's data ends (a series that starts after it, a product launched in the test months,
    may set nothing training decides, such as a static covariate's scale or categories)."""
    trained = np.flatnonzero(borders.train_end > 0)
    last = frame.timestamps[frame.bounds[trained] + borders.train_end[trained] - 1].max()
    return np.asarray(frame.timestamps[frame.bounds[:-1]] <= last)


def scale_inputs(frame: SeriesFrame, layout: Layout, scaler: Scaler, static_scale: StaticScale | None) -> SeriesInputs:
    """The frame's rows by role, as the model reads them: targets and the data's covariates standardised with
    `scaler` (computed in float64, then float32; 0 where unobserved), the calendar features and the learned
    cycle's phase from the timestamps, the static covariates encoded."""
    if frame.input_names != layout.scaled:
        raise DataError(f"the data holds the inputs {list(frame.input_names)}, the model reads {list(layout.scaled)}")
    scaled = _scale(frame, scaler)  # (n_rows, C + n_past + n_future)
    c, p = layout.n_targets, layout.n_past
    future = [scaled[:, c + p :]] if layout.future else []
    if layout.calendar:
        future.append(calendar_features(frame.timestamps, frame.freq))
    observed = ~np.isnan(frame.values)  # filled cells count: --fill gave them a value
    static_values = static_codes = None
    if layout.static:
        static_values, static_codes = encode_static(
            frame.static, layout.static_numeric, layout.static_categorical, static_scale
        )
    return SeriesInputs(
        target=torch.from_numpy(np.ascontiguousarray(scaled[:, :c])),
        observed=None if observed.all() else torch.from_numpy(observed),
        bounds=frame.bounds,
        past=torch.from_numpy(np.ascontiguousarray(scaled[:, c : c + p])) if p else None,
        future=torch.from_numpy(np.ascontiguousarray(np.concatenate(future, axis=1))) if future else None,
        phase=torch.from_numpy(cycle_phase(frame.timestamps, frame.freq, layout.cycle)) if layout.cycle else None,
        static_values=None if static_values is None else torch.from_numpy(static_values),
        static_codes=None if static_codes is None else torch.from_numpy(static_codes),
    )


def forecast_index(
    frame: SeriesFrame,
    future: np.ndarray | None,
    layout: Layout,
    scaler: Scaler,
    static_scale: StaticScale | None,
    context_len: int,
    horizon: int,
) -> tuple[WindowIndex, pd.DatetimeIndex]:
    """One window per series, forecasting the `horizon` steps after its last row, and those steps' timestamps
    (series after series). Each series is extended by the horizon (targets and past-only covariates unobserved
    there, known-future covariates from `future` (n_ids, horizon, n_future) or None) and scaled as its history
    is; a history shorter than the context is left-padded."""
    offset = to_offset(frame.freq)
    lasts = frame.timestamps[frame.bounds[1:] - 1]
    ranges = [pd.date_range(last + offset, periods=horizon, freq=offset) for last in lasts]
    ahead = ranges[0].append(ranges[1:])
    extended = _extended(frame, horizon, ahead, future)
    floors = extended.bounds[:-1]
    index = WindowIndex(
        scale_inputs(extended, layout, scaler, static_scale),
        torch.from_numpy(floors + frame.lengths),
        torch.from_numpy(floors.copy()),
        context_len,
        horizon,
    )
    return index, ahead


def _extended(frame: SeriesFrame, horizon: int, ahead: pd.DatetimeIndex, future: np.ndarray | None) -> SeriesFrame:
    """`frame` with `horizon` rows after each series' last (timestamps `ahead`, series after series): unobserved
    targets and past-only covariates, and the known-future covariates `future` (n_ids, horizon, n_future)."""
    new_bounds = frame.bounds + horizon * np.arange(frame.n_ids + 1)
    old_rows = np.arange(frame.n_rows) + horizon * frame.id_of_rows()  # each row's place among the new ones
    new_rows = (new_bounds[1:, None] - horizon + np.arange(horizon)).reshape(-1)  # the horizon of each series

    def grown(block: np.ndarray | None, after: np.ndarray | None = None, empty=np.nan) -> np.ndarray | None:
        if block is None:
            return None
        out = np.full((int(new_bounds[-1]), block.shape[1]), empty, dtype=block.dtype)
        out[old_rows] = block
        if after is not None:
            out[new_rows] = after.reshape(-1, block.shape[1])
        return out

    order = np.argsort(np.concatenate([old_rows, new_rows]), kind="stable")  # old rows, then the new, into place
    return dataclasses.replace(
        frame,
        timestamps=pd.DatetimeIndex(frame.timestamps.append(ahead)[order], name=frame.timestamps.name),
        values=grown(frame.values),
        observed=grown(frame.observed, empty=False),
        past=grown(frame.past),
        future=grown(frame.future, future),
        bounds=new_bounds,
    )


def scale_season(cfg: Config, freq: str) -> int:
    """The season the scaler measures change over (data.scale=seasonal), else 0: the std."""
    return max(season_length(freq), 1) if cfg.data.scale == "seasonal" else 0


def require_non_negative(frame: SeriesFrame) -> None:
    """data.floor=zero declares that no target goes below zero: a target cell below it, in the file trained on or
    one forecast from, is an error."""
    below = frame.observed & (frame.values < 0)  # (n_rows, C)
    if not below.any():
        return
    column = int(np.flatnonzero(below.any(axis=0))[0])
    cells = below[:, column]
    count = int(cells.sum())
    raise DataError(
        f"data.floor=zero says no target goes below zero, but column {frame.columns[column]!r} has {count} "
        f"value{'s' * (count > 1)} below zero (the lowest {float(frame.values[cells, column].min()):g}); "
        "train with data.floor=auto or none"
    )


def fit_scaler(
    frame: SeriesFrame, borders: SplitBorders, notes: tuple[str, ...] = (), season: int = 0
) -> tuple[Scaler, tuple[str, ...]]:
    """The train-only scaler of the targets and covariates: a wide file's columns, or each series of a
    panel on its own training rows."""
    inputs = frame.inputs()  # (n_rows, C + n_covariates), NaN where missing
    if not frame.id_cols:
        train_end = int(borders.train_end[0])
        train_observed = frame.observed[:train_end].any(axis=0)
        if not train_observed.all():
            name = frame.columns[int(np.flatnonzero(~train_observed)[0])]
            raise DataError(
                f"column {name!r} has no value in the {train_end} training rows, so it cannot be "
                "scaled or learned; give it training data or choose other --target columns"
            )
        return Scaler.fit(inputs[:train_end], season), notes
    scaler, borrowed = Scaler.fit_series(inputs, frame.bounds, borders.train_end, season)
    if borrowed.any():
        notes += (
            f"{int(borrowed.sum())} series without a training value in some column ({_first_names(frame, borrowed)}); "
            "each is scaled with the statistics of all series' training rows",
        )
    return scaler, notes


def _split_note(cfg: Config, frame: SeriesFrame, borders: SplitBorders, train_history: int) -> str:
    """How each series was split, and which series have no training window (skipped from training)."""
    horizon = cfg.model.horizon
    if cfg.data.split_borders:
        rule = f"at data.split_borders {list(cfg.data.split_borders)}"
    elif cfg.data.split_ratios:
        rule = f"by data.split_ratios {'/'.join(f'{r:g}' for r in cfg.data.split_ratios)}"
    else:
        k = val_horizons(cfg.data, frame.lengths, horizon)
        origins = f"{k} horizon{'s' * (k > 1)}: {(k - 1) * horizon + 1} forecast origins, data.val_horizons"
        rule = f"its last {horizon} steps are test, the {k * horizon} before them validation ({origins}), the rest"
        rule += " training"
    line = f"{frame.n_ids} series, split one by one ({rule}); statistics from training steps only"
    no_window = window_counts("train", borders, train_history, horizon) == 0
    if no_window.any():
        line += (
            f"; {int(no_window.sum())} series too short for a training window of {horizon} steps after "
            f"{train_history} of history, skipped from training (still forecast): {_first_names(frame, no_window)}"
        )
    return line


def series_difference(frame: SeriesFrame, series: tuple[tuple[str, ...], ...]) -> str:
    """How the file's series differ from the run's (as sets), in a few words."""
    have, want = set(frame.keys), set(series)
    if want - have:
        missing = sorted(want - have)
        return f"lacks {len(missing)} of the run's {len(series)} series (first {'/'.join(missing[0])!r})"
    extra = sorted(have - want)  # the sets differ: series in another order are put in the run's (`in_series_order`)
    return f"has {len(extra)} series the run was not trained on (first {'/'.join(extra[0])!r})"


def _first_names(frame: SeriesFrame, mask: np.ndarray, n: int = 5) -> str:
    picked = [frame.names[i] for i in np.flatnonzero(mask)[:n]]
    more = int(mask.sum()) - len(picked)
    return ", ".join(repr(name) for name in picked) + (f" and {more} more" if more > 0 else "")


def data_fingerprint(frame: SeriesFrame) -> dict[str, str | int]:
    """Rows, first and last timestamp, and a sha256 of the timestamps and values a model is trained on."""
    digest = hashlib.sha256(frame.timestamps.asi8.tobytes())
    digest.update(np.ascontiguousarray(frame.values).tobytes())
    covariates = frame.inputs()[:, len(frame.columns) :]  # the past-only, then the known-future covariates
    if covariates.shape[1]:
        digest.update(np.ascontiguousarray(covariates).tobytes())
        digest.update("\0".join(frame.past_names + frame.future_names).encode())
    if frame.static is not None:
        digest.update(frame.static.to_csv(index=False).encode())
    digest.update("\0".join(frame.columns).encode())
    if frame.id_cols:
        digest.update(frame.bounds.tobytes())
        digest.update("\0".join(frame.names).encode())
    return {
        "rows": frame.n_rows,
        "first": str(frame.timestamps[0]),
        "last": str(frame.timestamps[-1]),
        "sha256": digest.hexdigest(),
    }


MAX_STANDARD_DEVIATIONS = 1e6


def _scale(frame: SeriesFrame, scaler: Scaler) -> np.ndarray:
    """Standardised float32 values; a value absurdly far from the training rows is a data error."""
    ids = frame.id_of_rows() if frame.n_ids > 1 else 0
    mean, std = scaler.mean[ids], scaler.std[ids]  # (n_rows or 1, n_inputs)
    inputs = frame.inputs()
    scaled = (inputs.astype(np.float64) - mean) / std
    far = ~(np.abs(scaled) <= MAX_STANDARD_DEVIATIONS) & ~np.isnan(scaled)  # NaN: an unobserved cell
    if far.any():
        row, j = (int(i[0]) for i in np.nonzero(far))
        i = int(np.searchsorted(frame.bounds, row, side="right")) - 1
        where = f" of series {frame.names[i]!r}" if frame.id_cols else ""
        raise DataError(
            f"column {frame.input_names[j]!r}{where} is {inputs[row, j]:g} at {frame.timestamps[row]}, over "
            f"{MAX_STANDARD_DEVIATIONS:g} standard deviations from the training rows (mean {scaler.mean[i, j]:g}, "
            f"std {scaler.std[i, j]:g}); fix the value or rescale the column"
        )
    return np.nan_to_num(scaled, nan=0.0).astype(np.float32)
