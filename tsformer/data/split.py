"""Chronological splits, the train-only scaler and stride-1 windows.

A split owns the rows it forecasts (its *targets*); validation and test windows may read their
context from earlier rows, but no target row belongs to two splits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from tsformer.config import DataConfig
from tsformer.errors import DataError

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class SplitBorders:
    """Exclusive row ends of each split's targets; train starts at row 0."""

    train_end: int
    val_end: int
    test_end: int

    def target_range(self, split: str) -> tuple[int, int]:
        """[first, end) rows whose values this split forecasts."""
        return {
            "train": (0, self.train_end),
            "val": (self.train_end, self.val_end),
            "test": (self.val_end, self.test_end),
        }[split]

    def to_list(self) -> list[int]:
        return [self.train_end, self.val_end, self.test_end]


def split_borders(cfg: DataConfig, timestamps: pd.DatetimeIndex, context_len: int, horizon: int) -> SplitBorders:
    """Borders from explicit rows/dates or from ratios, checked to leave a window in every split."""
    n_rows = len(timestamps)
    if cfg.split_borders:
        ends = [_border_row(b, timestamps) for b in cfg.split_borders]
        if not (0 < ends[0] < ends[1] < ends[2] <= n_rows):
            raise DataError(
                f"data.split_borders {list(cfg.split_borders)} give rows {ends}, which must increase and stay "
                f"within the {n_rows} rows; fix data.split_borders"
            )
    else:
        cumulative = np.cumsum(cfg.split_ratios)
        ends = [min(n_rows, int(round(n_rows * r))) for r in cumulative]
        if not (0 < ends[0] < ends[1] < ends[2] <= n_rows):
            ratios = "/".join(f"{r:g}" for r in cfg.split_ratios)
            raise DataError(
                f"too few rows: {n_rows} row{'s' * (n_rows != 1)} cannot be split {ratios} into train, validation "
                "and test; provide more rows"
            )
    borders = SplitBorders(*ends)
    _check_room(borders, context_len, horizon)
    return borders


def _border_row(border: int | str, timestamps: pd.DatetimeIndex) -> int:
    if isinstance(border, int):
        return border
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
    return int(timestamps.searchsorted(when))


def _check_room(borders: SplitBorders, context_len: int, horizon: int) -> None:
    need = {"train": context_len + horizon, "val": horizon, "test": horizon}
    for split in SPLITS:
        first, end = borders.target_range(split)
        if end - first < need[split]:
            what = "context_len + horizon" if split == "train" and context_len else "horizon"
            raise DataError(
                f"too few rows: the {split} split has {end - first} rows but needs at least "
                f"{need[split]} ({what} = {need[split]}); provide more rows or lower --context-len/--horizon"
            )


@dataclass(frozen=True)
class Scaler:
    """Per-column standardisation fit on the training rows only."""

    mean: np.ndarray  # (n_series,)
    std: np.ndarray  # (n_series,)

    @classmethod
    def fit(cls, train_values: np.ndarray) -> Scaler:
        """Mean and std of each column's observed (not NaN) training cells."""
        observed = ~np.isnan(train_values)  # every column has some (prepare says which one does not)
        if observed.all():
            mean = train_values.mean(axis=0, dtype=np.float64)
            std = train_values.std(axis=0, dtype=np.float64)
        else:
            mean = np.nanmean(train_values.astype(np.float64), axis=0)
            std = np.nanstd(train_values.astype(np.float64), axis=0)
        std = np.where(std > 1e-12, std, 1.0)
        return cls(mean=mean.astype(np.float32), std=std.astype(np.float32))

    def transform(self, values: np.ndarray) -> np.ndarray:
        return ((values - self.mean) / self.std).astype(np.float32)

    def inverse(self, scaled: np.ndarray) -> np.ndarray:
        return (scaled * self.std + self.mean).astype(np.float32)

    def to_dict(self) -> dict[str, list[float]]:
        return {"mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_dict(cls, raw: dict[str, list[float]]) -> Scaler:
        return cls(mean=np.asarray(raw["mean"], dtype=np.float32), std=np.asarray(raw["std"], dtype=np.float32))


def window_target_starts(split: str, borders: SplitBorders, context_len: int, horizon: int) -> np.ndarray:
    """Row of the first target step of every stride-1 window of `split`."""
    first, end = borders.target_range(split)
    first = max(first, context_len)
    return np.arange(first, end - horizon + 1)


def make_windows(values: torch.Tensor, target_starts: np.ndarray, context_len: int, horizon: int) -> torch.Tensor:
    """Stride-1 windows as a view: (n_windows, context_len + horizon, n_series).

    Window i holds rows [target_starts[i] - context_len, target_starts[i] + horizon);
    `target_starts` must be consecutive.
    """
    if len(target_starts) == 0:
        return values.new_empty((0, context_len + horizon, values.shape[1]))
    assert np.all(np.diff(target_starts) == 1), "windows are built for consecutive target starts"
    first_row = int(target_starts[0]) - context_len
    last_row = int(target_starts[-1]) + horizon
    span = values[first_row:last_row]  # (rows, n_series)
    return span.unfold(0, context_len + horizon, 1).transpose(1, 2)  # (n_windows, L + H, n_series)


def split_window(window: torch.Tensor, context_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """window (B, context_len + horizon, ...) -> context (B, context_len, ...), target (B, horizon, ...)."""
    return window[:, :context_len], window[:, context_len:]
