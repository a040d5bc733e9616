"""Calendar features: known-future covariates derived from the timestamps alone.

Every future step's timestamp is known, so its phase in the day, week and year is a legitimate
input for forecasting it. Each cycle is a (sin, cos) pair, chosen by what the frequency can show:
hour of day and day of week below a day, day of week and of year for daily data, week of year for
weekly, month of year for monthly and quarterly data, nothing for yearly.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.tseries.frequencies import to_offset

DAY_NS = 24 * 3600 * 10**9


def calendar_cycles(freq: str) -> tuple[str, ...]:
    """The cycles a frequency can show: some of day, week, year (by day) and year (by month)."""
    offset = to_offset(freq)
    try:
        step = offset.nanos
    except ValueError:  # calendar offsets: months, quarters, years, business days
        base = offset.rule_code.split("-")[0]
        if base in ("B", "C"):
            return ("week", "year")
        if base == "W":
            return ("year",)
        if base.startswith(("M", "Q", "BM", "BQ", "SM", "CBM")):
            return ("month",)
        return ()
    if step < DAY_NS:
        return ("day", "week")
    if step < 7 * DAY_NS:
        return ("week", "year")
    if step < 28 * DAY_NS:
        return ("year",)
    return ()


def calendar_names(freq: str) -> tuple[str, ...]:
    """Feature names, e.g. ("day_sin", "day_cos", "week_sin", "week_cos") for hourly data."""
    return tuple(f"{cycle}_{part}" for cycle in calendar_cycles(freq) for part in ("sin", "cos"))


def calendar_features(timestamps: pd.DatetimeIndex, freq: str) -> np.ndarray:
    """(n_rows, len(calendar_names(freq))) float32: each cycle's phase as sin and cos."""
    phases = []
    for cycle in calendar_cycles(freq):
        if cycle == "day":
            seconds = timestamps.hour * 3600 + timestamps.minute * 60 + timestamps.second
            phases.append(np.asarray(seconds, dtype=np.float64) / 86400)
        elif cycle == "week":
            phases.append(np.asarray(timestamps.day_of_week + timestamps.hour / 24, dtype=np.float64) / 7)
        elif cycle == "year":
            phases.append(np.asarray(timestamps.day_of_year - 1, dtype=np.float64) / 365.25)
        else:  # month of year
            phases.append(np.asarray(timestamps.month - 1, dtype=np.float64) / 12)
    if not phases:
        return np.zeros((len(timestamps), 0), dtype=np.float32)
    angle = 2 * np.pi * np.stack(phases, axis=1)  # (n_rows, n_cycles)
    return np.stack([np.sin(angle), np.cos(angle)], axis=2).reshape(len(timestamps), -1).astype(np.float32)
