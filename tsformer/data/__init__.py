"""Reading, validating, splitting, scaling and windowing series.

The names are imported on first use, so reading a CSV (`tsformer.data.loader`, pandas only) does not
load torch: a command's input errors come before it.
"""

from __future__ import annotations

from tsformer.lazy import lazy_names

_NAMES = {
    "tsformer.data.choices": ("CalendarGain", "calendar_gain", "resolve_from_data"),
    "tsformer.data.loader": ("SeriesFrame", "Source", "fill_column", "read_series"),
    "tsformer.data.prepare": (
        "Prepared",
        "data_fingerprint",
        "forecast_index",
        "prepare",
        "scale_inputs",
        "training_data",
    ),
    "tsformer.data.split": (
        "SPLITS",
        "panel_min_history",
        "Scaler",
        "SplitBorders",
        "split_borders",
        "split_window",
        "window_counts",
        "window_target_starts",
    ),
    "tsformer.data.static": ("StaticScale",),
    "tsformer.data.timestamps": ("parse_freq",),
    "tsformer.data.windows": ("SeriesInputs", "Split", "WindowIndex", "Windows"),
}
_MODULE_OF = {name: module for module, names in _NAMES.items() for name in names}
__all__ = sorted(_MODULE_OF)


__getattr__, __dir__ = lazy_names(globals(), _MODULE_OF)
