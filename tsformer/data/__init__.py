"""Reading, validating, splitting, scaling and windowing series."""

from tsformer.data.loader import SeriesFrame, Source, fill_column, read_series
from tsformer.data.prepare import (
    Prepared,
    data_fingerprint,
    forecast_index,
    panel_min_history,
    prepare,
    resolve_sizes,
    scale_inputs,
    training_data,
)
from tsformer.data.split import (
    SPLITS,
    Scaler,
    SplitBorders,
    split_borders,
    split_window,
    window_counts,
    window_target_starts,
)
from tsformer.data.static import StaticScale
from tsformer.data.timestamps import parse_freq
from tsformer.data.windows import SeriesInputs, Split, WindowIndex, Windows

__all__ = [
    "SPLITS",
    "Prepared",
    "Scaler",
    "SeriesFrame",
    "SeriesInputs",
    "Source",
    "Split",
    "SplitBorders",
    "StaticScale",
    "WindowIndex",
    "Windows",
    "data_fingerprint",
    "fill_column",
    "forecast_index",
    "panel_min_history",
    "parse_freq",
    "prepare",
    "read_series",
    "resolve_sizes",
    "scale_inputs",
    "split_borders",
    "split_window",
    "training_data",
    "window_counts",
    "window_target_starts",
]
