"""Reading, validating, splitting, scaling and windowing series.

The names are imported on first use, so reading a CSV (`tsformer.data.loader`, pandas only) does not
load torch: a command's input errors come before it.
"""

from __future__ import annotations

import importlib

_NAMES = {
    "tsformer.data.loader": ("SeriesFrame", "Source", "fill_column", "read_series"),
    "tsformer.data.prepare": (
        "Prepared",
        "data_fingerprint",
        "forecast_index",
        "panel_min_history",
        "prepare",
        "resolve_sizes",
        "scale_inputs",
        "training_data",
    ),
    "tsformer.data.split": (
        "SPLITS",
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


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'tsformer.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))
