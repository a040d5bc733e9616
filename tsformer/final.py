"""The final fit: the held-out run's recipe repeated on every row, and when a forecast may use it.

Everything is chosen on the held-out model, which trains on each series' training rows and is scored on
validation: the epochs, the fallback per series and column, the intervals. The final model then repeats
the held-out run's epochs up to its best (the same schedule over as many epochs, each epoch as many windows
as every row gives) on windows drawn from every row, and the linear candidate is fitted again on them,
so their forecasts after the data's end start where their training data end, as the validation forecasts
started where the held-out model's did.

Evaluate, backtest and check score the held-out model, which never read a validation or test row.
Predict uses the final model where every trained series' data reach as far as its training did; data
that end earlier would put forecast origins inside what it read, so the held-out model forecasts them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tsformer.data import Prepared, SeriesFrame, SplitBorders
from tsformer.model import ForecasterBase


@dataclass(frozen=True)
class FinalFit:
    """The model trained on every row, and which rows those were."""

    model: ForecasterBase  # in eval mode
    until: np.ndarray  # (n_series,) int64: each trained series' last timestamp it read, as ns since the epoch (UTC)
    steps: int  # optimiser steps it took: the held-out run's epochs up to its best, over every row's windows
    n_windows: int  # training windows it drew them from
    seconds: float = 0.0  # its training's wall time
    linear: ForecasterBase | None = None  # the linear candidate fitted on the same windows; None: the run has none

    def __post_init__(self) -> None:
        if self.until.dtype != np.int64 or self.until.ndim != 1 or self.steps < 0:
            raise ValueError("a final fit needs one last timestamp per series and no negative count of steps")


def every_row(data: Prepared) -> Prepared:
    """`data` with each series' training split reaching its last row (the scaler stays the training rows')."""
    lengths = data.frame.lengths.astype(np.int64)
    return dataclasses.replace(data, borders=SplitBorders(lengths, lengths.copy(), lengths.copy()))


def last_timestamps(frame: SeriesFrame) -> np.ndarray:
    """(n_ids,) int64 each series' last timestamp in ns since the epoch (UTC for an offset-aware index)."""
    return frame.timestamps.asi8[frame.bounds[1:] - 1].astype(np.int64)


def ends_early(until: np.ndarray, trained: tuple[tuple[str, ...], ...], frame: SeriesFrame) -> list[str]:
    """The names of the frame's trained series whose data end before the final model's training did."""
    position = {key: i for i, key in enumerate(trained)}
    last = last_timestamps(frame)
    return [frame.names[j] for j, key in enumerate(frame.keys) if key in position and last[j] < until[position[key]]]
