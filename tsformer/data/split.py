"""Chronological splits, the train-only scaler and stride-1 windows.

A split owns the rows it forecasts (its *targets*); validation and test windows may read their
context from earlier rows, but no target row belongs to two splits.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from tsformer.config import DEFAULT_SPLIT_RATIOS, MAX_VAL_HORIZONS, DataConfig, ModelConfig
from tsformer.data.loader import SeriesFrame
from tsformer.errors import DataError
from tsformer.metrics import season_length

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class SplitBorders:
    """Per series, the exclusive ends of each split's targets, in rows from the series' first row;
    train starts at the series' first row. Arrays of shape (n_ids,), int64."""

    train_end: np.ndarray
    val_end: np.ndarray
    test_end: np.ndarray

    def target_range(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """[first, end) rows (within each series) whose values this split forecasts: (n_ids,) each."""
        return {
            "train": (np.zeros_like(self.train_end), self.train_end),
            "val": (self.train_end, self.val_end),
            "test": (self.val_end, self.test_end),
        }[split]

    def to_list(self) -> list[list[int]]:
        return [self.train_end.tolist(), self.val_end.tolist(), self.test_end.tolist()]

    @classmethod
    def from_list(cls, ends: list[list[int]]) -> SplitBorders:
        train_end, val_end, test_end = (np.asarray(e) for e in ends)  # checked by the checkpoint loader
        return cls(train_end, val_end, test_end)


def split_borders(
    cfg: DataConfig, frame: SeriesFrame, context_len: int, horizon: int, min_history: int | None = None
) -> SplitBorders:
    """Each series' borders from explicit rows/dates, from ratios, or (long format, no ratios given) its
    last `horizon` steps as test and `val_horizons` x `horizon` before them as validation (M4's convention,
    with several validation origins: `val_horizons`).

    One series (a wide file) must leave a window of `context_len` in every split; in a panel, each
    split needs a window in some series, with at least `min_history` steps before the target.
    """
    lengths = frame.lengths
    if cfg.split_borders:
        ends = np.stack([_border_rows(b, frame) for b in cfg.split_borders], axis=1)  # (n_ids, 3)
        if frame.id_cols:  # a panel: a border past a series' end (it ends early) stops at its end, one before its
            ends = np.clip(ends, 0, lengths[:, None])  # start (counted back from a short series' end) at its start
            bad = ~((ends[:, 0] <= ends[:, 1]) & (ends[:, 1] <= ends[:, 2]))  # the room is checked over all series
        else:
            bad = ~((0 < ends[:, 0]) & (ends[:, 0] < ends[:, 1]) & (ends[:, 1] < ends[:, 2]) & (ends[:, 2] <= lengths))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            where = f" of series {frame.names[i]!r}" if frame.id_cols else ""
            raise DataError(
                f"data.split_borders {list(cfg.split_borders)} give rows {ends[i].tolist()}{where}, which must "
                f"increase and stay within its {lengths[i]} rows; fix data.split_borders"
            )
    elif cfg.split_ratios or frame.n_ids == 1:
        ratios = cfg.split_ratios or DEFAULT_SPLIT_RATIOS
        cumulative = np.cumsum(ratios)
        ends = np.minimum(lengths[:, None], np.round(lengths[:, None] * cumulative[None]).astype(np.int64))
        if frame.n_ids == 1 and not (0 < ends[0, 0] < ends[0, 1] < ends[0, 2] <= lengths[0]):
            n_rows = int(lengths[0])
            raise DataError(
                f"too few rows: {n_rows} row{'s' * (n_rows != 1)} cannot be split {'/'.join(f'{r:g}' for r in ratios)} "
                "into train, validation and test; provide more rows"
            )
    else:
        val_len = val_horizons(cfg, lengths, horizon) * horizon
        ends = np.stack([np.maximum(lengths - horizon - val_len, 0), np.maximum(lengths - horizon, 0), lengths], axis=1)
    borders = SplitBorders(*(ends[:, k].astype(np.int64) for k in range(3)))
    if frame.n_ids == 1 and not frame.id_cols:
        _check_room(borders, context_len, horizon, frame.freq)
    else:
        _check_panel_room(borders, frame, min_history if min_history is not None else context_len, horizon)
    return borders


def val_horizons(cfg: DataConfig, lengths: np.ndarray, horizon: int) -> int:
    """Long format's default split: horizons of validation per series, data.val_horizons or (auto) the most,
    up to MAX_VAL_HORIZONS, that leave the median series at least half its rows for training (at least 1)."""
    if cfg.val_horizons is not None:
        return cfg.val_horizons
    median = float(np.median(lengths)) if len(lengths) else 0.0
    fits = [k for k in range(1, MAX_VAL_HORIZONS + 1) if (k + 1) * horizon <= median / 2]
    return max(fits, default=1)


def _border_rows(border: int | str, frame: SeriesFrame) -> np.ndarray:
    """(n_ids,) the row (within each series) where `border` falls; a negative row counts back from the series' end."""
    if isinstance(border, int):
        rows = np.full(frame.n_ids, border, dtype=np.int64)
        return frame.lengths.astype(np.int64) + rows if border < 0 else rows
    timestamps = frame.timestamps
    try:
        when = pd.Timestamp(border)
    except ValueError:
        raise DataError(f"split border {border!r} is neither a row number nor a date; fix data.split_borders") from None
    if (when.tz is None) != (timestamps.tz is None):
        which = "it has a UTC offset and they do not" if when.tz else "they have a UTC offset and it does not"
        raise DataError(
            f"split border {border!r} does not match the timestamps: {which}; write the border like the "
            f"timestamps (e.g. {timestamps[0]}) in data.split_borders"
        )
    return np.array([timestamps[frame.rows_of(i)].searchsorted(when) for i in range(frame.n_ids)], dtype=np.int64)


def _check_room(borders: SplitBorders, context_len: int, horizon: int, freq: str) -> None:
    need = {"train": context_len + horizon, "val": horizon, "test": horizon}
    rows = {split: int(e[1][0] - e[0][0]) for split, e in ((s, borders.target_range(s)) for s in SPLITS)}
    for split in SPLITS:
        if rows[split] < need[split]:
            what = "context_len + horizon" if split == "train" and context_len else "horizon"
            fits = min(rows["val"], rows["test"], rows["train"] - max(context_len, 1))  # the longest horizon that fits
            raise DataError(
                f"too few rows: the {split} split has {rows[split]} rows but needs at least {need[split]} "
                f"({what} = {need[split]}{_default_horizon(horizon)}); provide more rows, or {_lower(fits, freq)}"
            )


def _check_panel_room(borders: SplitBorders, frame: SeriesFrame, min_history: int, horizon: int) -> None:
    """Every split needs a window in at least one series."""
    for split in SPLITS:
        history = min_history if split == "train" else 1
        if not window_counts(split, borders, history, horizon).any():
            longest = int(frame.lengths.max())
            rule = "its last 2 x horizon steps as validation and test" if split != "train" else "its split"
            fits = (longest - min(min_history, longest // 4)) // 3  # test, validation, a training window: H each
            raise DataError(
                f"too few rows: no series has a {split} window of {horizon} steps{_default_horizon(horizon)} after "
                f"{history} step{'s' * (history > 1)} of history (the longest series has {longest} rows, and each "
                f"gives {rule}); provide longer series, or {_lower(fits, frame.freq)}"
            )


def _default_horizon(horizon: int) -> str:
    """ ", the default horizon" when `horizon` is model.horizon's default: a user may not know it was asked."""
    default = ModelConfig().horizon
    return f"; {default} is the default horizon: --horizon sets it" if horizon == default else ""


def _lower(fits: int, freq: str) -> str:
    """How to lower the horizon: to at most `fits` steps, with a season of the data as an example when it fits."""
    if fits < 1:
        return "lower --context-len"
    season = season_length(freq)
    example = f", e.g. --horizon {season} (a season of {freq} data)" if 1 < season <= fits else ""
    return f"a --horizon of at most {fits}{example}, or a shorter --context-len"


@dataclass(frozen=True)
class Scaler:
    """Per series and column standardisation, fit on each series' training rows only."""

    mean: np.ndarray  # (n_ids, n_columns) float32
    std: np.ndarray  # (n_ids, n_columns) float32: the scale (the std, or the seasonal MAE with data.scale=seasonal)
    # (n_ids, n_columns) float32: each column's smallest observed training value (NaN: none), which sets its
    # forecasts' floor (`floors`); None: not recorded (a run saved before it was), so no forecast is floored
    lowest: np.ndarray | None = None

    @classmethod
    def fit(cls, train_values: np.ndarray, season: int = 0) -> Scaler:
        """One series: each column's mean and scale over its observed (not NaN) training cells, (1, n_columns).

        The scale is the std, or with `season` the mean absolute change over one season (a season longer
        than the rows: over one step), falling back to the std where that is 0."""
        observed = ~np.isnan(train_values)  # every column has some (prepare says which one does not)
        if observed.all():
            mean = train_values.mean(axis=0, dtype=np.float64)
            std = train_values.std(axis=0, dtype=np.float64)
        else:
            with warnings.catch_warnings():  # a covariate with no training value: mean 0, std 1
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nan_to_num(np.nanmean(train_values.astype(np.float64), axis=0))
                std = np.nanstd(train_values.astype(np.float64), axis=0)
        with warnings.catch_warnings():  # a column with no training value: NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            lowest = np.nanmin(train_values, axis=0) if len(train_values) else np.full(train_values.shape[1], np.nan)
        if season:
            change = _seasonal_mae(train_values, season)
            std = np.where(change > 1e-12, change, std)
        std = np.where(std > 1e-12, std, 1.0)
        return cls(
            mean=mean.astype(np.float32)[None], std=std.astype(np.float32)[None], lowest=lowest.astype(np.float32)[None]
        )

    @classmethod
    def fit_series(
        cls, values: np.ndarray, bounds: np.ndarray, train_end: np.ndarray, season: int = 0
    ) -> tuple[Scaler, np.ndarray]:
        """Each series' statistics from its own training rows; a series with no observed training cell in a
        column takes the statistics of every series' training rows there. Returns the scaler and the (n_ids,)
        mask of series that had to borrow them."""
        train_rows = [values[int(b) : int(b) + int(n)] for b, n in zip(bounds[:-1], train_end, strict=True)]
        lacking = np.array([np.isnan(rows).all(axis=0).any() for rows in train_rows])  # a column with no value
        pooled = cls.fit(np.concatenate(train_rows)) if len(train_rows) > 1 and lacking.any() else None
        fitted, borrowed = [], np.zeros(len(train_rows), dtype=bool)
        for i, rows in enumerate(train_rows):
            if pooled is not None and lacking[i]:
                borrowed[i] = True
                own = cls.fit(rows, season) if len(rows) and not np.isnan(rows).all() else pooled
                empty = np.isnan(rows).all(axis=0) if len(rows) else np.ones(rows.shape[1], dtype=bool)
                fitted.append(cls(*(np.where(empty, getattr(pooled, k), getattr(own, k)) for k in STATISTICS)))
            else:
                fitted.append(cls.fit(rows, season))
        return cls.stack(fitted), borrowed

    def transform(self, values: np.ndarray, ids: np.ndarray | int = 0) -> np.ndarray:
        """values (..., n_columns) of series `ids` (one index, or one per leading row) -> scaled, computed in
        float64 (as `prepare` scales the data, so a forecast's inputs are the same bits either way)."""
        return ((values.astype(np.float64) - self.mean[ids]) / self.std[ids]).astype(np.float32)

    def first(self, n: int) -> Scaler:
        """The statistics of its first `n` columns: the targets, in a layout's scaled order (`Layout.scaled`)."""
        return self.rows(slice(None), slice(0, n))

    def rows(self, ids: np.ndarray | slice, columns: slice = slice(None)) -> Scaler:
        """The statistics of series `ids` (and `columns`)."""
        lowest = None if self.lowest is None else self.lowest[ids, columns]
        return Scaler(self.mean[ids, columns], self.std[ids, columns], lowest)

    @classmethod
    def stack(cls, scalers: list[Scaler]) -> Scaler:
        """The rows of `scalers`, one after another (without `lowest` where one lacks it)."""
        lowest = None if any(one.lowest is None for one in scalers) else np.concatenate([s.lowest for s in scalers])
        return cls(np.concatenate([s.mean for s in scalers]), np.concatenate([s.std for s in scalers]), lowest)

    def floors(self, rule: str = "auto", columns: np.ndarray | None = None) -> np.ndarray:
        """(n_ids, n_columns) scaled: the value 0 where forecasts may not go below zero, -inf elsewhere (no floor).
        By `rule` (data.floor): auto, where a series' column reached zero in its training rows and never went below
        it (counts, sales, volumes; nowhere for a scaler without `lowest`), or where `columns` (n_columns,) bool
        says so for every series (a panel's column, one quantity: `bounded_columns`); zero, every column; none, no
        column."""
        zero = (-self.mean / self.std).astype(np.float32)
        if rule == "zero":
            return zero
        if rule == "none" or self.lowest is None:
            return np.full(self.mean.shape, -np.inf, dtype=np.float32)
        if columns is not None:
            return np.where(columns, zero, -np.inf).astype(np.float32)
        bounded = np.nan_to_num(self.lowest, nan=-1.0) == 0  # NaN: no training value, no floor
        return np.where(bounded, zero, -np.inf).astype(np.float32)

    def bounded_columns(self) -> np.ndarray | None:
        """(n_columns,) bool: the columns that reached zero in some series' training rows and went below it in none
        (a panel of counts: a series of fives that never sold nothing is still counted); None without `lowest`."""
        if self.lowest is None:
            return None
        seen = ~np.isnan(self.lowest)  # (n_ids, n_columns): a series with a training value there
        lowest = np.where(seen, self.lowest, np.inf).min(axis=0)
        return seen.any(axis=0) & (lowest == 0)

    def inverse(self, scaled: np.ndarray, ids: np.ndarray | int = 0) -> np.ndarray:
        return (scaled * self.std[ids] + self.mean[ids]).astype(np.float32)

    def to_dict(self) -> dict[str, list[list[float]]]:
        raw = {"mean": self.mean.tolist(), "std": self.std.tolist()}
        if self.lowest is not None:  # NaN (no training value) as None, which JSON holds
            raw["lowest"] = np.where(np.isnan(self.lowest), None, self.lowest).tolist()
        return raw

    @classmethod
    def from_dict(cls, raw: dict[str, list[list[float]]]) -> Scaler:
        lowest = raw.get("lowest")
        if lowest is not None:
            lowest = np.array(lowest, dtype=np.float64).astype(np.float32)  # None -> NaN
        return cls(np.asarray(raw["mean"], dtype=np.float32), np.asarray(raw["std"], dtype=np.float32), lowest)


STATISTICS = ("mean", "std", "lowest")  # a Scaler's arrays, in field order


def _seasonal_mae(values: np.ndarray, season: int) -> np.ndarray:
    """(n_columns,) mean |x_t - x_{t - season}| over pairs of observed cells (NaN where there is none)."""
    season = season if season < len(values) else 1
    diffs = np.abs(values[season:].astype(np.float64) - values[:-season])
    pairs = ~np.isnan(diffs)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pairs, diffs, 0.0).sum(axis=0) / pairs.sum(axis=0)


def panel_min_history(split: str, context_len: int, horizon: int) -> int:
    """Steps of its series a panel's window needs before its first target: min(context_len, horizon) in
    training (shorter contexts are left-padded), one in validation and test."""
    return min(context_len, horizon) if split == "train" else 1


def window_counts(split: str, borders: SplitBorders, min_history: int, horizon: int) -> np.ndarray:
    """(n_ids,) how many stride-1 windows of `split` each series has."""
    first, end = borders.target_range(split)
    first = np.maximum(first, min_history)
    return np.maximum(end - horizon - first + 1, 0)


def window_target_starts(
    split: str, borders: SplitBorders, bounds: np.ndarray, min_history: int, horizon: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every stride-1 window of `split`, series after series: the row of its first target step (in the
    stacked rows) and its series' first row, (n_windows,) int64 each. A window needs `min_history`
    earlier steps of its series (the model's context_len for a wide file) and its targets in the split."""
    first, _ = borders.target_range(split)
    first = np.maximum(first, min_history)
    counts = window_counts(split, borders, min_history, horizon)
    series = np.repeat(np.arange(len(counts)), counts)
    offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)  # 0.. within each series
    floors = bounds[:-1][series].astype(np.int64)
    return floors + first[series] + offsets, floors


def split_window(window: torch.Tensor, context_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """window (B, context_len + horizon, ...) -> context (B, context_len, ...), target (B, horizon, ...)."""
    return window[:, :context_len], window[:, context_len:]
