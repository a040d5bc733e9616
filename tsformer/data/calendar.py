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
UNIT_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


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


def calendar_names(freq: str, features: bool = True) -> tuple[str, ...]:
    """Feature names, e.g. ("day_sin", "day_cos", "week_sin", "week_cos") for hourly data; () without features."""
    return tuple(f"{c}_{part}" for c in calendar_cycles(freq) for part in ("sin", "cos")) if features else ()


def calendar_features(timestamps: pd.DatetimeIndex, freq: str) -> np.ndarray:
    """(n_rows, len(calendar_names(freq))) float32: each cycle's phase as sin and cos."""
    return _sin_cos(timestamps, freq)


def cycle_phase(timestamps: pd.DatetimeIndex, freq: str, cycle: int) -> np.ndarray:
    """(n_rows,) float32: each step's phase in a learned cycle of `cycle` steps, 0..cycle-1 (exact in float32)."""
    return (step_numbers(timestamps, freq) % cycle).astype(np.float32)


def step_numbers(timestamps: pd.DatetimeIndex, freq: str) -> np.ndarray:
    """(n_rows,) int64: each timestamp's number of `freq` steps since the Unix epoch, so that the phase in a
    cycle is the same for every series at the same time. Steps under a day count in UTC; days and longer
    count on the local calendar (a daylight-saving change must not skip or repeat a day)."""
    offset = to_offset(freq)
    try:
        step = offset.nanos
    except ValueError:  # calendar offsets: weeks, months, quarters, years
        return _calendar_steps(timestamps.tz_localize(None) if timestamps.tz is not None else timestamps, freq)
    if step >= DAY_NS and timestamps.tz is not None:
        timestamps = timestamps.tz_localize(None)  # the wall-clock dates
    elif timestamps.tz is not None:
        timestamps = timestamps.tz_convert("UTC").tz_localize(None)
    per_unit = UNIT_NS[timestamps.unit]  # the index may hold seconds or microseconds: divide in its own unit
    if step % per_unit == 0:
        return timestamps.asi8 // (step // per_unit)
    return timestamps.as_unit("ns").asi8 // step


def _calendar_steps(local: pd.DatetimeIndex, freq: str) -> np.ndarray:
    """Step numbers of a calendar frequency, on naive local timestamps."""
    offset = to_offset(freq)
    base = offset.rule_code.split("-")[0]
    months = np.asarray(local.year * 12 + local.month - 1, dtype=np.int64)
    if base == "W":
        days = local.as_unit("s").asi8 // 86400
        return (days - 4) // (7 * offset.n)  # weeks starting on a Monday (1970-01-01 was a Thursday)
    if base in ("SMS", "SME", "SM"):  # semi-monthly: the 1st and 15th (SMS), or the 15th and the month's end
        second = local.day >= 15 if base == "SMS" else local.day > 15
        halves = 2 * months + np.asarray(second, dtype=np.int64)
        return halves // offset.n
    if base.startswith(("Q", "BQ")):
        return months // (3 * offset.n)
    if base.startswith(("M", "BM", "CBM")):
        return months // offset.n
    if base.startswith(("Y", "A", "BY", "BA")):
        return np.asarray(local.year, dtype=np.int64) // offset.n
    raise DataError(
        f"a learned cycle (model.cycle) needs a regular clock step, and frequency {freq} has none; set model.cycle=0"
    )


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
