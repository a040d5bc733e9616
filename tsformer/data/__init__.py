"""Reading, validating, splitting, scaling and windowing series."""

from tsformer.data.loader import SeriesFrame, fill_column, parse_freq, read_series
from tsformer.data.prepare import Prepared, WindowIndex, Windows, data_fingerprint, panel_min_history, prepare
from tsformer.data.split import (
    SPLITS,
    Scaler,
    SplitBorders,
    make_windows,
    split_borders,
    split_window,
    window_counts,
    window_target_starts,
)

__all__ = [
    "SPLITS",
    "Prepared",
    "data_fingerprint",
    "fill_column",
    "parse_freq",
    "prepare",
    "Scaler",
    "SeriesFrame",
    "SplitBorders",
    "WindowIndex",
    "Windows",
    "panel_min_history",
    "window_counts",
    "make_windows",
    "read_series",
    "split_borders",
    "split_window",
    "window_target_starts",
]
