"""Reading, validating, splitting, scaling and windowing series."""

from tsformer.data.loader import SeriesFrame, read_series
from tsformer.data.prepare import Prepared, prepare
from tsformer.data.split import (
    SPLITS,
    Scaler,
    SplitBorders,
    make_windows,
    split_borders,
    window_target_starts,
)

__all__ = [
    "SPLITS",
    "Prepared",
    "prepare",
    "Scaler",
    "SeriesFrame",
    "SplitBorders",
    "make_windows",
    "read_series",
    "split_borders",
    "window_target_starts",
]
