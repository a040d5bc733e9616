"""Calendar features: known-future covariates derived from the timestamps alone.

Every future step's timestamp is known, so its phase in the day, week and year is a legitimate
input for forecasting it. Each cycle is a (sin, cos) pair, chosen by what the frequency can show:
hour of day and day of week below a day, day of week and of year for daily data, week of year for
weekly, month of year for monthly and quarterly data, nothing for yearly.

A model with a learned cycle (`model.cycle`) also reads each step's phase in that cycle: the number of
steps since the Unix epoch modulo the cycle length, so the hour of day (UTC) for hourly data and a cycle
of 24. It is known-future in the same way.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.tseries.frequencies import to_offset

from tsformer.errors import DataError

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


def calendar_names(freq: str, features: bool = True, cycle: int = 0) -> tuple[str, ...]:
    """Feature names, e.g. ("day_sin", "day_cos", "week_sin", "week_cos") for hourly data, then
    "cycle24_phase" with a learned cycle of 24 steps (always last: the model finds it there)."""
    names = tuple(f"{c}_{part}" for c in calendar_cycles(freq) for part in ("sin", "cos")) if features else ()
    return names + ((f"cycle{cycle}_phase",) if cycle else ())


def calendar_features(timestamps: pd.DatetimeIndex, freq: str, features: bool = True, cycle: int = 0) -> np.ndarray:
    """(n_rows, len(calendar_names(freq, features, cycle))) float32: each cycle's phase as sin and cos,
    then the phase in the learned cycle (0..cycle-1, exact in float32)."""
    columns = [_sin_cos(timestamps, freq)] if features else []
    if cycle:
        columns.append((step_numbers(timestamps, freq) % cycle).astype(np.float32)[:, None])
    if not columns:
        return np.zeros((len(timestamps), 0), dtype=np.float32)
    return np.concatenate(columns, axis=1)


def step_numbers(timestamps: pd.DatetimeIndex, freq: str) -> np.ndarray:
    """(n_rows,) int64: each timestamp's number of `freq` steps since the Unix epoch (UTC), so that the
    phase in a cycle is the same for every series at the same time."""
    offset = to_offset(freq)
    utc = timestamps.tz_convert("UTC").tz_localize(None) if timestamps.tz is not None else timestamps
    nanos = utc.as_unit("ns").asi8  # the index may hold seconds or microseconds
    try:
        return nanos // offset.nanos
    except ValueError:  # calendar offsets
        base = offset.rule_code.split("-")[0]
        if base == "W":
            return nanos // (7 * DAY_NS * offset.n)
        if base.startswith(("M", "Q", "BM", "BQ", "SM", "CBM")):
            months = np.asarray(utc.year * 12 + utc.month - 1, dtype=np.int64)
            return months // ((3 if base.startswith(("Q", "BQ")) else 1) * offset.n)
        if base in ("Y", "A", "YS", "AS", "BY", "BA"):
            return np.asarray(utc.year, dtype=np.int64) // offset.n
        raise DataError(
            f"a learned cycle (model.cycle) needs a regular clock step, and frequency {freq} has none; "
            "set model.cycle=0"
        ) from None


def _sin_cos(timestamps: pd.DatetimeIndex, freq: str) -> np.ndarray:
    """(n_rows, 2 * n_cycles) float32: each calendar cycle's phase as sin and cos."""
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
