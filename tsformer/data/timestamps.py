"""Time in a table: the time column, its timestamps, their order and frequency, and the regular grid.

Every problem a user can fix becomes a DataError whose message names the column and the line of the
file (or the row of a DataFrame) and says how to fix it.
"""

from __future__ import annotations

import datetime
import functools
import itertools
import re
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pandas.tseries.api import guess_datetime_format
from pandas.tseries.frequencies import to_offset

from tsformer.config import DataConfig
from tsformer.data.csvfile import names
from tsformer.errors import DataError

TIME_COL_NAMES = ("date", "timestamp", "time", "datetime", "ds", "period", "dt", "day", "year")
EPOCH_UNITS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}  # nanoseconds per unit of a Unix epoch integer
NOTATION_SAMPLE = 10_000  # rows, spread over the file, whose text the output notation must give back
QUARTER = re.compile(r"^(\d{4})(\s*-?\s*)[Qq]([1-4])$")  # 1998Q1, 1998 Q1, 1998-Q1
ISO_WEEK = re.compile(r"^\d{4}-W\d{2}$")  # 2015-W02: the ISO week, read as its Monday and written back alike
ISO_WEEK_FORMAT = "%G-W%V"
UNPADDED = {"%m": "%-m", "%d": "%-d", "%H": "%-H"}  # month, day and hour without a leading zero (glibc's strftime)
DAYLIGHT_SAVING_ENDS = (3, 4, 10, 11)  # the months daylight saving time ends in, south and north
STRAY_WEEKENDS = 0.01  # daily rows: a weekend share at most this, the rest business days, earns a note
WHOLE_YEAR = r"\d{4}(?:\.0*)?"  # 1935, or 1935.0 as a float column's export writes it
MONTH = r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\b"
MONTH_AND_YEAR = re.compile(rf"(?i)^(?=.*{MONTH})(?=.*\b\d{{4}}\b)")  # a month's name and a year: Jan 2000
MONTH_NAME_FORMATS = ("%b %Y", "%B %Y", "%b-%Y", "%B-%Y", "%Y %b", "%d %b %Y", "%d-%b-%Y", "%b %d, %Y", "%B %d, %Y")
YEAR_PARTS = {"quarter": 4, "month": 12}  # a column beside `year` that says which part of it a row is


@dataclass(frozen=True)
class TimeNotation:
    """How a time column is written, so that output is written the same way: dates and times in a strftime
    `format` ("" for pandas' own), Unix epoch integers in a `unit`, or quarter labels with a `separator`."""

    kind: str = "datetime"  # "datetime", "epoch" or "quarter"
    format: str = ""  # datetime: a strftime format ("%Y-%m" for 2023-05) or ""; epoch: s, ms, us or ns; quarter:
    # what stands between the year and Q ("", " " or "-")

    def write(self, timestamps: pd.DatetimeIndex) -> np.ndarray:
        """The timestamps in this notation: text, or epoch integers."""
        if self.kind == "epoch":
            return timestamps.as_unit("ns").asi8 // EPOCH_UNITS[self.format]
        if self.kind == "quarter":
            return np.array([f"{t.year}{self.format}Q{t.quarter}" for t in timestamps], dtype=object)
        if self.format:
            text = pd.Series(timestamps.strftime(self.format.replace("%:z", "%z").replace("%3f", "%f")))
            if "%3f" in self.format:  # milliseconds: %f's six digits less the last three
                text = text.str.replace(r"(\.\d{3})\d{3}", r"\1", n=1, regex=True)
            if "%:z" in self.format:  # the offset as +05:30 (%z writes +0530; Python 3.12's %:z is not 3.11's)
                text = text.str.replace(r"([+-]\d{2})(\d{2})$", r"\1:\2", regex=True)
            return text.to_numpy(dtype=object)
        return np.array([str(t) for t in timestamps], dtype=object)  # pandas' astype(str) drops a midnight's time

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "format": self.format}

    @classmethod
    def from_dict(cls, raw: dict[str, str]) -> TimeNotation:
        notation = cls(str(raw["kind"]), str(raw["format"]))
        if notation.kind not in ("datetime", "epoch", "quarter") or (
            notation.kind == "epoch" and notation.format not in EPOCH_UNITS
        ):
            raise ValueError(f"time notation {raw} is none tsformer writes")
        return notation


@dataclass(frozen=True)
class ReadEvidence:
    """What the reader decided over the whole file, kept so that `tsformer.data.reading` can make the same
    decisions again from the training rows alone: the rows the frequency was inferred from (the longest
    series, as read, before the grid), each reading of ambiguous day/month dates, an id column found by its
    values, and the columns read as text where default targets were picked."""

    freq_series: int  # the series the frequency and the date order were read from: the one with the most rows
    freq_stamps: pd.DatetimeIndex  # its timestamps as read
    freq_lines: np.ndarray  # their lines
    date_order: str = ""  # the reading chosen over the whole file when day and month were ambiguous, else ""
    date_readings: dict[str, pd.DatetimeIndex] | None = None  # each reading of the longest series' rows
    id_by_values: str = ""  # the id column found by its values (no column named like one), else ""
    # the columns that could have been default targets and were read as text: their cells (indexed by line), with
    # each row's series and timestamp (file order), to judge them again on the training rows
    text_columns: dict[str, pd.Series] = field(default_factory=dict)
    mark_columns: dict[str, pd.Series] = field(default_factory=dict)  # text targets of a file whose delimiter is not
    # a comma, as read: their decimal mark (`loader.decimal_comma`), decided again on the training rows
    row_series: np.ndarray | None = None  # (n_rows,) int64
    row_stamps: pd.DatetimeIndex | None = None  # (n_rows,)


SHORT_YEAR_DATE = re.compile(r"^\d{1,2}([/.-])\d{1,2}\1\d{2}$")  # 01/02/20: a date with a two-digit year


def date_readings(column: pd.Series, cfg: DataConfig, sample: np.ndarray | None) -> dict[str, pd.DatetimeIndex] | None:
    """Each reading (month-first, day-first) of the `sample` rows' dates when their order is ambiguous and not
    stated by `cfg.dayfirst`; None otherwise."""
    if pd.api.types.is_datetime64_any_dtype(column):
        return None
    readings = _date_orders(str(column.iloc[0]).strip(), cfg.dayfirst)
    if len(readings) < 2:  # decided by the notation itself (ISO, stated, a day above 12): nothing to redo
        return None
    text = column.astype(str).str.strip()
    rows = text if sample is None else text[sample]
    parsed = {order: _to_datetime(rows, fmt, dayfirst=order == "day-first") for order, fmt in readings.items()}
    return {order: pd.DatetimeIndex(p) for order, p in parsed.items() if p is not None and not p.isna().any()}


def pick_date_order(readings: dict[str, pd.DatetimeIndex], name: str, cfg: DataConfig) -> str:
    """The order `parse_timestamps` picks from these readings (the rules of `_pick_date_order`)."""
    order, _ = _pick_date_order({o: pd.Series(r) for o, r in readings.items()}, name, cfg)
    return order


def as_text(timestamps: pd.DatetimeIndex, like: pd.DatetimeIndex | None = None) -> np.ndarray:
    """Timestamps as text, without a time of day when every one (of `like`: the data they come from) is at
    midnight, as in daily and longer data."""
    like = timestamps if like is None else like
    midnight = bool((like == like.normalize()).all())
    if midnight:
        return np.asarray(timestamps.strftime("%Y-%m-%d"), dtype=object)
    return np.array([str(t) for t in timestamps], dtype=object)  # pandas' astype(str) drops a midnight's time


def find_time_col(table: pd.DataFrame, requested: str, source: str, cfg: DataConfig) -> tuple[str, tuple[str, ...]]:
    """The time column: as given (--time-col), else the first named like one (TIME_COL_NAMES) that reads as
    increasing timestamps, or the first so named, else the first
    whose values all read as increasing timestamps (a `month` column of 2004-01, 2004-02, ...), with a note."""
    if requested:
        if requested not in table.columns:
            raise DataError(f"time column {requested!r} not in {source}; columns are: {names(table.columns)}")
        return requested, ()
    named = [column for column in table.columns if column.lower() in TIME_COL_NAMES]
    if named:  # the first that reads as increasing timestamps (a Date beside a Year of repeated years), else the first
        return next((column for column in named if _reads_as_time(table[column], cfg)), named[0]), ()
    for column in table.columns:
        if _reads_as_time(table[column], cfg):
            return column, (
                f"took {column!r} as the time column: no column is named like one ({', '.join(TIME_COL_NAMES)}), and "
                "it is the first whose values read as increasing timestamps (--time-col names another)",
            )
    raise DataError(
        f"no time column found in {source} (looked for {', '.join(TIME_COL_NAMES)}, and for a column of increasing "
        f"timestamps; columns are: {names(table.columns)}); name it with --time-col"
    )


def join_year_and_part(table: pd.DataFrame, time_col: str) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """A `year` time column beside a `quarter` (1-4) or `month` (1-12) column, as official statistics write
    them (statsmodels' macrodata: year, quarter, realgdp, ...): the table with the time column holding both
    (1959Q1, 1959-01) and the part column dropped, and a note; else the table as it is."""
    years = _whole_years(table[time_col].astype(str).str.strip()) if time_col.lower() == "year" else None
    if years is None:
        return table, ()
    for column in table.columns:
        part = YEAR_PARTS.get(str(column).lower())
        if part is None:
            continue
        values = pd.to_numeric(table[column], errors="coerce")
        if values.isna().any() or not values.between(1, part).all() or not (values == values.round()).all():
            return table, ()
        number = values.astype(np.int64).astype(str)
        joined = years + "Q" + number if part == 4 else years + "-" + number.str.zfill(2)
        table = table.drop(columns=[column]).assign(**{time_col: joined})
        return table, (f"read the time from {time_col!r} and {column!r} ({joined.iloc[0]}, {joined.iloc[-1]}, ...)",)
    return table, ()


def _whole_years(text: pd.Series) -> pd.Series | None:
    """The cells as years without a fraction (1935.0 is 1935) where every one is a whole year, else None."""
    return text.str.split(".").str[0] if text.str.fullmatch(WHOLE_YEAR).all() else None


def _reads_as_time(column: pd.Series, cfg: DataConfig) -> bool:
    """Whether every value of a column reads as a timestamp, the first of them increasing: a text or datetime
    column, or integers of Unix-epoch size (plain numbers such as 1, 2, 3 are values, not times)."""
    if column.isna().any() or pd.api.types.is_bool_dtype(column) or pd.api.types.is_float_dtype(column):
        return False
    text = column.astype(str).str.strip()
    if pd.api.types.is_integer_dtype(column) and _epoch_unit(text, cfg.time_unit) is None:
        return False
    head = text.iloc[: min(len(text), 50)]
    first = head.iloc[0]
    with warnings.catch_warnings():  # pandas warns of a day-first guess: the reading is chosen later
        warnings.simplefilter("ignore")
        guessed = guess_datetime_format(first, dayfirst=cfg.dayfirst)
    if not (QUARTER.match(first) or ISO_WEEK.match(first) or MONTH_AND_YEAR.match(first) or guessed) and not (
        _epoch_unit(head, cfg.time_unit)
    ):
        return False
    try:
        stamps, _, _ = parse_timestamps(column.iloc[: len(head)], str(column.name), cfg)
    except DataError:
        return False
    return bool((np.diff(stamps.asi8) > 0).all())


def _epoch_unit(text: pd.Series, stated: str) -> str | None:
    """The unit of integer Unix epochs (s, ms, us or ns: `stated`, or by magnitude), or None when the values are
    not integers of epoch size (at least 1e8: from 1973 in seconds; a year or 20240131 is a date)."""
    if not re.fullmatch(r"-?\d+", text.iloc[0]) or not text.str.fullmatch(r"-?\d+").all():  # the first: quick
        return None
    try:
        values = text.astype(np.int64).abs()
    except (OverflowError, ValueError):  # past int64 (9223372036854775808): no epoch, a value
        return None
    if stated:
        return stated
    if values.min() < 10**8:
        return None
    typical = float(values.median())
    return "s" if typical < 1e11 else "ms" if typical < 1e14 else "us" if typical < 1e17 else "ns"


def parse_timestamps(
    column: pd.Series, name: str, cfg: DataConfig, sample: np.ndarray | None = None
) -> tuple[pd.DatetimeIndex, tuple[str, ...], TimeNotation]:
    """Timestamps, notes on how they were read, and how they were written (to write output alike).

    Numbers are read as text, so 2024 is a year; integers of Unix-epoch size are epochs, in seconds,
    milliseconds, microseconds or nanoseconds by their magnitude (or `cfg.time_unit`); quarter labels
    (1998Q1, 1998 Q1, 1998-Q1) are the quarters' first days. Timestamps written with UTC offsets are
    read at one offset, `cfg.utc_offset` or the first row's, whatever later rows carry (a daylight-saving
    switch written after the training rows must not move a training row's hour). Dates whose day and month
    order is ambiguous (01/02/2024) are read the way that gives regular, increasing timestamps (in the rows
    of `sample`, the longest series of a long file), or day-first with `cfg.dayfirst`.
    """
    missing = column.isna().to_numpy()
    if missing.any():
        line = column.index[missing][0]
        raise DataError(f"empty timestamp in time column {name!r} at line {line}; every row needs a timestamp")
    if pd.api.types.is_datetime64_any_dtype(column):  # a DataFrame's own timestamps
        stamps = pd.DatetimeIndex(column)
        return (_in_zone(stamps, name, cfg.time_zone) if cfg.time_zone else stamps), (), TimeNotation()
    text = column.astype(str).str.strip()
    years = _whole_years(text)
    text = text if years is None else years
    unit = _epoch_unit(text, cfg.time_unit)
    if unit is not None:
        stamps = pd.DatetimeIndex(pd.to_datetime(text.astype(np.int64), unit=unit))
        seen = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}[unit]
        note = () if cfg.time_unit else (
            f"read the integer time column {name!r} as Unix epoch {seen} (by their magnitude; --time-unit states "
            "the unit)",
        )  # fmt: skip
        return stamps, note, TimeNotation("epoch", unit)
    if text.str.match(ISO_WEEK).all():
        mondays = pd.to_datetime(text + "-1", format=f"{ISO_WEEK_FORMAT}-%u", errors="coerce")
        bad = mondays.isna().to_numpy()
        if bad.any():
            line = column.index[bad][0]
            raise DataError(
                f"{text[line]!r} in time column {name!r} at line {line} is no ISO week (a year has 52 or 53); "
                "write every week as its ISO label, such as 2015-W02"
            )
        return pd.DatetimeIndex(mondays), (), TimeNotation("datetime", ISO_WEEK_FORMAT)
    quarters = text.str.extract(QUARTER)
    if not quarters.isna().any(axis=None):
        periods = pd.PeriodIndex.from_fields(year=quarters[0].astype(int), quarter=quarters[2].astype(int), freq="Q")
        return periods.to_timestamp(), (), TimeNotation("quarter", quarters[1].iloc[0])
    readings = _date_orders(text.iloc[0], cfg.dayfirst)
    parsed = {order: _to_datetime(text, fmt, dayfirst=order == "day-first") for order, fmt in readings.items()}
    sampled = {order: p if p is None or sample is None else p[sample] for order, p in parsed.items()}
    order, notes = _pick_date_order(sampled, name, cfg)
    timestamps = parsed[order]
    bad = timestamps.isna().to_numpy() if timestamps is not None else np.ones(len(text), dtype=bool)
    if bad.any():
        line = column.index[bad][0]
        if text.str.fullmatch(r"-?\d+").all():  # step numbers (0, 1, 2, ...), too small for Unix times
            raise DataError(
                f"time column {name!r} holds integers ({text.iloc[0]}, {text.iloc[1 % len(text)]}, ...), not dates; "
                "give the rows their dates (the frequency sets the seasons and the forecast's times), or pass "
                "--time-unit s to read step numbers as seconds (forecasts are then numbered on from the last)"
            )
        raise DataError(
            f"cannot parse {text[line]!r} in time column {name!r} at line {line} as a date; "
            "use one date format such as 2024-01-31 13:00"
        )
    stamps = pd.DatetimeIndex(timestamps)
    if cfg.time_zone:
        stamps = _in_zone(stamps, name, cfg.time_zone)
    elif stamps.tz is not None:  # one stated offset, whatever offsets later rows are written with
        first = pd.DatetimeIndex(_to_datetime(text.iloc[:1], readings[order], order == "day-first"))
        if first.tz is None:
            raise DataError(
                f"time column {name!r} writes its first timestamp {text.iloc[0]!r} without a UTC offset and later "
                "ones with one; write every timestamp with an offset (such as +01:00 or Z) or none"
            )
        zone = cfg.utc_offset or written_offset(first)
        mixed = str(stamps.tz) == "UTC" and not _all_utc(text)
        stamps = stamps.tz_convert(fixed_zone(zone))
        whose = "data.utc_offset" if cfg.utc_offset else "the first row's offset"
        wall = _wall_clock(text, readings[order], order == "day-first") if mixed else None
        if wall is not None and _one_time_of_day(wall) and not _one_time_of_day(stamps):
            stamps = wall.tz_localize(fixed_zone(zone))  # daily data across daylight saving: its local dates
            notes += (
                f"time column {name!r} changes UTC offset (daylight saving) at one time of day: read as each row's "
                f"local date and time, written at {whose}, {zone}",
            )
        elif mixed:
            notes += (
                f"time column {name!r} mixes UTC offsets (daylight saving?); its times are read, given calendar "
                f"features and written at {whose}, {zone}; --set data.time_zone=ZONE (such as Europe/Berlin) "
                "reads and writes each at its zone's own offset",
            )
    return _to_month_starts(stamps, notes, _notation(stamps, text, order == "day-first"), name)


def _to_month_starts(
    stamps: pd.DatetimeIndex, notes: tuple[str, ...], notation: TimeNotation, name: str
) -> tuple[pd.DatetimeIndex, tuple[str, ...], TimeNotation]:
    """Dates that all fall on one day of their months after the first (the 15th, as many monthly reports are
    stamped), read as their months' first days, which pandas' monthly (and quarterly, yearly) frequencies lay out,
    and written back on that day. Without it such a file had no frequency, and --freq MS moved its forecast to the
    1st of each month without a word."""
    day = int(stamps[0].day) if len(stamps) else 1
    fmt = notation.format
    code = next((c for c in ("%d", "%-d") if c in fmt), None) if notation.kind == "datetime" else None
    one_day = len(stamps) >= 3 and stamps.tz is None and 1 < day <= 28 and (stamps.day == day).all()
    if not (one_day and code and (stamps == stamps.normalize()).all()):
        return stamps, notes, notation
    literal = f"{day:02d}" if code == "%d" else str(day)
    note = f"time column {name!r} dates every row on day {day} of its month: read as months (their first days)"
    return stamps - pd.Timedelta(days=day - 1), (*notes, note), TimeNotation("datetime", fmt.replace(code, literal))


def _in_zone(stamps: pd.DatetimeIndex, name: str, zone: str) -> pd.DatetimeIndex:
    """Timestamps that state their UTC offsets as the local times of the IANA `zone` (data.time_zone): the same
    instants, each at the zone's own offset, so calendar features read local hours and output writes local times."""
    if stamps.tz is None:
        raise DataError(
            f"time column {name!r} writes no UTC offsets, so data.time_zone={zone} cannot place its times; write "
            "each with its offset (such as 2024-03-31T03:00:00+02:00), or leave data.time_zone unset to read them "
            "as written"
        )
    return stamps.tz_convert(zone)


def _wall_clock(text: pd.Series, fmt: str | None, dayfirst: bool) -> pd.DatetimeIndex | None:
    """Each timestamp as its row writes it, its UTC offset dropped (None when that does not parse)."""
    bare = text.str.replace(r"\s*(?:Z|[+-]\d{2}:?\d{2})$", "", regex=True)
    parsed = _to_datetime(bare, fmt.replace("%z", "").strip() if fmt else None, dayfirst)
    if parsed is None or parsed.isna().any():
        return None
    wall = pd.DatetimeIndex(parsed)
    return wall if wall.tz is None else None


def _one_time_of_day(stamps: pd.DatetimeIndex) -> bool:
    """Whether every timestamp falls at the same time of day (daily or coarser data)."""
    return (stamps - stamps.normalize()).nunique() == 1


def written_offset(first: pd.Series | pd.DatetimeIndex) -> str:
    """The UTC offset the first timestamp carries, as +HH:MM."""
    minutes = int(pd.DatetimeIndex(first)[0].utcoffset().total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def fixed_zone(offset: str) -> datetime.timezone:
    """The fixed zone of an offset such as +01:00 (UTC itself for +00:00)."""
    sign = -1 if offset.startswith("-") else 1
    hours, minutes = (int(part) for part in offset[1:].split(":"))
    delta = datetime.timedelta(hours=hours, minutes=minutes) * sign
    return datetime.UTC if not delta else datetime.timezone(delta)


OFFSET_WRITTEN = r"([+-]\d{2}:?\d{2}|Z)$"  # a time's UTC offset as written at its end


def _notation(timestamps: pd.DatetimeIndex, text: pd.Series, dayfirst: bool) -> TimeNotation:
    """The strftime format the text was written in, when writing the timestamps with it gives the text back
    (2023-05 stays 2023-05, 31/01/2024 stays so); else pandas' own (as for times converted to UTC)."""
    fmt = _guess_format(text.iloc[0], dayfirst)
    rows = np.unique(np.linspace(0, len(text) - 1, min(len(text), NOTATION_SAMPLE)).astype(np.int64))
    written = text.to_numpy()[rows]
    tried = (fmt,) if fmt else MONTH_NAME_FORMATS if MONTH_AND_YEAR.match(text.iloc[0]) else ()
    if fmt and fmt.endswith("%z") and text.iloc[0].endswith("Z"):  # ISO's Z for UTC, which %z writes as +0000
        tried = (fmt[:-2] + "Z", fmt)
    elif fmt and fmt.endswith("%z") and re.search(r"[+-]\d{2}:\d{2}$", text.iloc[0]):  # +05:30, ISO's way
        tried = (fmt[:-2] + "%:z", fmt)
    if fmt and "%f" in fmt and re.search(r"\.\d{3}(?!\d)", text.iloc[0]):  # milliseconds, not %f's microseconds
        tried = tuple(f.replace("%f", "%3f") for f in tried) + tried
    if fmt:  # 4/9/2024 5:00, as spreadsheets write dates: the fewest codes without their leading zero that fit
        present = [code for code in UNPADDED if code in fmt]
        for k in range(1, len(present) + 1):
            for codes in itertools.combinations(present, k):
                tried += (functools.reduce(lambda f, code: f.replace(code, UNPADDED[code]), codes, fmt),)
    offsets = pd.Series(written).str.extract(OFFSET_WRITTEN, expand=False)  # +02:00 in summer, +01:00 in winter
    if offsets.notna().all():  # the times are read at one offset: the rows written at another cannot match
        same = (offsets == offsets.iloc[0]).to_numpy()
        rows, written = rows[same], written[same]
    for fmt in tried:  # only output depends on it
        try:
            if (TimeNotation("datetime", fmt).write(timestamps[rows]) == written).all():
                return TimeNotation("datetime", fmt)
        except ValueError:  # a strftime without %-m (not glibc's): pandas' own notation
            continue
    return TimeNotation()


def _guess_format(sample: str, dayfirst: bool) -> str | None:
    """pandas' guess of the strftime format of `sample`, and the two-digit years it does not guess (01/02/20,
    31.12.99: month or day first as `dayfirst` says)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fmt = guess_datetime_format(sample, dayfirst=dayfirst)
    short = SHORT_YEAR_DATE.match(sample)
    if fmt or not short:
        return fmt
    mark = short.group(1)
    return mark.join(("%d", "%m", "%y") if dayfirst else ("%m", "%d", "%y"))


def _date_orders(sample: str, dayfirst: bool) -> dict[str, str | None]:
    """The readings to try: {"month-first": format, "day-first": format} when the order is ambiguous."""
    month_first = _guess_format(sample, dayfirst=False)
    day_first = _guess_format(sample, dayfirst=True)
    if month_first and month_first.startswith("%Y"):  # year first (ISO): no day/month question
        return {"month-first": month_first}
    if dayfirst:
        return {"day-first": day_first}
    if month_first and day_first and month_first != day_first:
        return {"month-first": month_first, "day-first": day_first}
    return {"month-first": None}  # one unambiguous reading: let pandas infer the format


def _pick_date_order(parsed: dict[str, pd.Series | None], name: str, cfg: DataConfig) -> tuple[str, tuple[str, ...]]:
    """The reading that gives regular, increasing timestamps (after --sort), saying so when it is day-first."""
    if len(parsed) == 1:
        return next(iter(parsed)), ()
    usable = {order: p for order, p in parsed.items() if p is not None and not p.isna().any()}
    good = [order for order, p in usable.items() if _regular(pd.DatetimeIndex(p), cfg)]
    example = {"month-first": "month/day", "day-first": "day/month"}
    if good == ["day-first"] or (not good and list(usable) == ["day-first"]):
        return "day-first", (
            f"read the dates in {name!r} as day/month: only that order gives regular, increasing timestamps "
            "(pass --dayfirst to say so and silence this note)",
        )
    if len(good) == 2:
        return "month-first", (
            f"the dates in {name!r} could be month/day or day/month and both give regular timestamps; "
            "read them as month/day (pass --dayfirst for day/month)",
        )
    if good or len(usable) == 1:
        return (good or list(usable))[0], ()
    raise DataError(
        f"the dates in time column {name!r} can be read as {' or '.join(example[o] for o in usable) or 'neither'} "
        "order, and neither gives regular, increasing timestamps; pass --dayfirst if they are day/month, or fix "
        "the dates"
    )


def _regular(timestamps: pd.DatetimeIndex, cfg: DataConfig) -> bool:
    """Strictly increasing (after sorting, with --sort) and evenly spaced, or stated irregular by --freq."""
    if cfg.sort:
        timestamps = timestamps.sort_values()
    if not (np.diff(timestamps.asi8) > 0).all():
        return False
    if bool(cfg.freq) or len(timestamps) < 3 or _infer_freq(timestamps) is not None:
        return True
    return _mostly_on_grid(timestamps, _guess_step(timestamps))  # regular but for gaps


def _to_datetime(text: pd.Series, fmt: str | None, dayfirst: bool = False) -> pd.Series | None:
    """Every cell in `fmt` (else one inferred format, then cell by cell); mixed UTC offsets become UTC."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandas' "could not infer format" notes
        for utc in (False, True):
            try:
                parsed = pd.to_datetime(text, errors="coerce", utc=utc, format=fmt, dayfirst=dayfirst)
                if parsed.isna().any() and fmt is None:
                    parsed = pd.to_datetime(text, errors="coerce", format="mixed", utc=utc, dayfirst=dayfirst)
                if isinstance(parsed.dtype, pd.DatetimeTZDtype | np.dtypes.DateTime64DType):
                    return parsed
            except (ValueError, TypeError, OverflowError):
                continue
    return None


def _all_utc(text: pd.Series) -> bool:
    """Whether every timestamp was written in UTC (Z or +00:00), so reading it as UTC changes nothing."""
    return bool(text.str.contains(r"(?:Z|[+-]00:?00)$", regex=True).all())


def check_order(timestamps: pd.DatetimeIndex, lines: np.ndarray, bounds: np.ndarray, names: tuple[str, ...]) -> None:
    """Within each series, timestamps strictly increase; the message names the series and the lines."""
    steps = np.diff(timestamps.asi8)
    steps[bounds[1:-1] - 1] = 1  # from one series' last row to the next series' first: no order
    if (steps > 0).all():
        return
    if names == ("",):  # no id: a repeat anywhere says more than the first decrease (several series stacked?)
        _refuse_repeats(timestamps, lines)
    i = int(np.flatnonzero(steps <= 0)[0])
    series = int(np.searchsorted(bounds, i, side="right")) - 1
    where = f"series {names[series]!r}: " if names[series] else ""
    first, second = timestamps[i], timestamps[i + 1]
    if steps[i] == 0:
        raise DataError(
            f"{where}duplicate timestamp {second} at lines {lines[i]} and {lines[i + 1]}; keep one row per series and "
            "timestamp"
        )
    stacked = (
        f"; if the rows from line {lines[i + 1]} are another series, name the column that tells the series apart "
        "with --id-col"
    )
    raise DataError(
        f"{where}timestamps decrease at line {lines[i + 1]} ({second} after {first} at line {lines[i]}); "
        f"sort the file by time or pass --sort{stacked if names == ('',) else ''}"
    )


def _refuse_repeats(timestamps: pd.DatetimeIndex, lines: np.ndarray) -> None:
    """A DataError naming the first timestamp that repeats (by its second row) and both lines, if one does."""
    repeated = timestamps.duplicated()
    if not repeated.any():
        return
    second = int(np.flatnonzero(repeated)[0])
    first = int(np.flatnonzero(timestamps == timestamps[second])[0])
    when = timestamps[second]
    hour_before = first >= 1 and timestamps[first] - timestamps[first - 1] == pd.Timedelta(hours=1)
    if first == second - 1 and hour_before and when.tz is None and _daylight_saving_end(when):
        raise DataError(  # a clock hour written twice: local time on the night daylight saving time ends
            f"duplicate timestamp {when} at lines {lines[first]} and {lines[second]}, an early Sunday hour written "
            "twice as local clocks do when daylight saving time ends; write each time with its UTC offset "
            "(2024-10-27 02:00:00+02:00, then +01:00 in Central Europe) or in UTC, or merge the two rows"
        )
    raise DataError(
        f"duplicate timestamp {when} at lines {lines[first]} and {lines[second]}; keep one row per "
        "timestamp, or name the column that tells several series apart with --id-col (repeated where it takes "
        "several: --id-col store --id-col item)"
    )


def _daylight_saving_end(when: pd.Timestamp) -> bool:
    """Whether a local time could be the hour clocks repeat when daylight saving time ends: a Sunday between 1:00
    and 3:00 in the months it ends in (October or November north of the equator, March or April south of it)."""
    return when.day_of_week == 6 and 1 <= when.hour <= 3 and when.month in DAYLIGHT_SAVING_ENDS


def resolve_freq(
    timestamps: pd.DatetimeIndex, stated: str, expected: str, lines: np.ndarray
) -> tuple[str, tuple[str, ...]]:
    """The stated --freq, else the frequency inferred from regular spacing, checked against `expected`.

    A stated frequency is trusted for irregular data (that is what --freq is for) but must fit
    regular data; `expected` (a trained model's frequency) must fit the data. Returns the
    frequency and a note when it could not be checked.
    """
    wanted = stated or expected
    offset = parse_freq(wanted, "--freq" if stated else "the checkpoint's frequency") if wanted else None
    whose = "the model was trained on" if expected and not stated else "--freq says"
    fix = "give data at the training frequency" if expected and not stated else "fix --freq"
    if len(timestamps) < 3:
        if offset is None:
            raise DataError(
                f"need at least 3 rows to infer the frequency, got {len(timestamps)}; add rows or pass --freq"
            )
        if len(timestamps) == 1:
            return offset.freqstr, (f"one row: its frequency cannot be checked against {offset.freqstr}",)
        if not _fits(timestamps, offset):
            step = timestamps[1] - timestamps[0]
            raise DataError(f"the two rows are {step} apart but {whose} {offset.freqstr} steps; {fix}")
        return offset.freqstr, ()
    inferred = _infer_freq(timestamps)
    if inferred is None:
        step = offset or _guess_step(timestamps)
        if offset is None and _business_days(timestamps, step):
            return "B", (
                "read as business days (B, season 5): the rows are a day apart but never on a Saturday or a Sunday, "
                "so the missing weekdays (holidays) are unobserved steps and the forecast skips weekends (--freq B "
                "states it)",
            )
        if _mostly_on_grid(timestamps, step):  # gaps: the missing timestamps become unobserved steps
            return step.freqstr, _stray_weekend_note(timestamps, step, lines) if offset is None else ()
        if stated:
            return offset.freqstr, ()
        raise _irregular(timestamps, lines, expected)
    if offset is None:
        return inferred.freqstr, ()
    if not _fits(timestamps, offset):
        raise DataError(f"the rows are {inferred.freqstr} apart but {whose} {offset.freqstr} steps; {fix}")
    return offset.freqstr, ()


def _business_days(timestamps: pd.DatetimeIndex, step: pd.DateOffset) -> bool:
    """Daily data that never falls on a weekend, over two weeks or more, on the business-day grid: a market's."""
    daily = step == to_offset("D") or step == to_offset("B")
    if not daily or len(timestamps) < 10 or (timestamps.day_of_week >= 5).any():
        return False
    return (timestamps == timestamps.normalize()).all() and _mostly_on_grid(timestamps, to_offset("B"))


def _stray_weekend_note(timestamps: pd.DatetimeIndex, step: pd.DateOffset, lines: np.ndarray) -> tuple[str, ...]:
    """A note when daily data would be business days but for a few weekend rows (at most STRAY_WEEKENDS of them)."""
    weekend = np.flatnonzero(timestamps.day_of_week >= 5)
    if not len(weekend) or len(weekend) > STRAY_WEEKENDS * len(timestamps):
        return ()
    if not _business_days(timestamps.delete(weekend), step):
        return ()
    first = int(weekend[0])
    return (
        f"read as daily (D): the rows fall on weekdays but for {len(weekend)} on a weekend (first "
        f"{timestamps[first]} at line {lines[first]}), so every weekend is a step, unobserved where no row has it; "
        "if the data are business days, drop the weekend rows (the forecast then skips weekends)",
    )


RENAMED_FREQS = {"M": "ME", "BM": "BME", "SM": "SME", "Q": "QE", "BQ": "BQE", "Y": "YE", "A": "YE", "BY": "BYE"}


def parse_freq(freq: str, what: str) -> pd.DateOffset:
    """A pandas offset that moves time forward, or a DataError naming `what` gave it."""
    try:
        offset = to_offset(freq)
    except ValueError:
        parts = re.fullmatch(r"(\d*)([A-Za-z]+)(-.*)?", freq.strip())  # 2, Q, -DEC
        count, alias, anchor = parts.groups("") if parts else ("", "", "")
        hint = f" (pandas now calls it {count + RENAMED_FREQS[alias] + anchor!r})" if alias in RENAMED_FREQS else ""
        raise DataError(f"{what} {freq!r} is not a pandas frequency such as h, D, W-SUN or 15min{hint}") from None
    if offset.n <= 0:
        raise DataError(f"{what} {freq!r} does not move time forward; give a positive step such as h or 15min")
    return offset


def _infer_freq(timestamps: pd.DatetimeIndex) -> pd.DateOffset | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pandas 3 warns that infer_freq will return an offset
            inferred = pd.infer_freq(timestamps)
    except (ValueError, TypeError):
        return None
    return to_offset(inferred) if inferred else None


def _fits(timestamps: pd.DatetimeIndex, offset: pd.DateOffset) -> bool:
    """Whether the timestamps are exactly consecutive steps of `offset`."""
    try:
        return bool(pd.date_range(timestamps[0], periods=len(timestamps), freq=offset).equals(timestamps))
    except (ValueError, OverflowError):
        return False


def _guess_step(timestamps: pd.DatetimeIndex) -> pd.DateOffset:
    """The spacing of the first (or last) three rows, else the most common step."""
    step = _infer_freq(timestamps[:3]) or _infer_freq(timestamps[-3:])
    if step is None:
        steps = pd.Series(np.diff(timestamps.asi8))
        step = to_offset(pd.Timedelta(int(steps.mode().iloc[0]), unit=timestamps.unit))
    return step


def _grid(timestamps: pd.DatetimeIndex, step: pd.DateOffset) -> pd.DatetimeIndex | None:
    """Every `step` from the first timestamp to the last, or None if `step` cannot lay one out, or if
    the grid would be over twice as long as the data (then the data are irregular, not gappy)."""
    try:
        span = (timestamps[-1] - timestamps[0]) / pd.Timedelta(step.nanos, unit="ns")
        if span + 1 > 2 * len(timestamps):
            return None
    except ValueError:  # a calendar step (months, business days): its grid is never long
        pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pd.date_range(timestamps[0], timestamps[-1], freq=step, name=timestamps.name)
    except (ValueError, OverflowError):
        return None


def _gappy_grid(timestamps: pd.DatetimeIndex, step: pd.DateOffset) -> pd.DatetimeIndex | None:
    """The `step` grid when every timestamp lies on it and the data fill at least half of it, else None."""
    grid = _grid(timestamps, step)
    if grid is None or len(grid) > 2 * len(timestamps) or not timestamps.isin(grid).all():
        return None
    return grid


def _mostly_on_grid(timestamps: pd.DatetimeIndex, step: pd.DateOffset) -> bool:
    """Every timestamp lies on the `step` grid, which the data fill at least half: a series with gaps."""
    return _gappy_grid(timestamps, step) is not None


def fill_the_grid(
    timestamps: pd.DatetimeIndex, values: np.ndarray, freq: str
) -> tuple[pd.DatetimeIndex, np.ndarray, tuple[str, ...]]:
    """Insert the timestamps missing from the regular grid as rows of NaN (unobserved steps)."""
    grid = _gappy_grid(timestamps, to_offset(freq)) if len(timestamps) >= 3 else None
    if grid is None or len(grid) == len(timestamps):
        return timestamps, values, ()  # regular already, or a stated --freq trusted for irregular rows
    full = np.full((len(grid), values.shape[1]), np.nan)
    full[grid.get_indexer(timestamps)] = values
    missing = grid[~grid.isin(timestamps)]
    note = (
        f"{len(missing)} timestamp{'s' * (len(missing) > 1)} missing from the {freq} grid (first {missing[0]}) "
        "became unobserved steps"
    )
    return grid, full, (note,)


def fill_the_grids(
    timestamps: pd.DatetimeIndex,
    values: np.ndarray,
    freq: str,
    bounds: np.ndarray,
    names: tuple[str, ...],
    lines: np.ndarray,
) -> tuple[pd.DatetimeIndex, np.ndarray, np.ndarray, tuple[str, ...]]:
    """Each series of a long file on its own `freq` grid, missing timestamps as rows of NaN; a series off
    the grid (another frequency, or too sparse to be gappy) is an error naming it and its line."""
    offset = to_offset(freq)
    try:
        step = offset.nanos if _one_offset(timestamps) else None
    except ValueError:  # a calendar step (months, business days): lay out each series' grid
        step = None
    as_ns = timestamps.as_unit("ns").asi8
    starts_ns = as_ns[bounds[:-1]]  # (n_ids,) each series' first timestamp
    series = np.repeat(np.arange(len(names)), np.diff(bounds))
    if step is not None:
        position = as_ns - starts_ns[series]
        off_grid = position % step != 0
        position //= step
    else:
        position = np.empty(len(timestamps), dtype=np.int64)
        off_grid = np.zeros(len(timestamps), dtype=bool)
        for i in range(len(names)):
            rows = slice(int(bounds[i]), int(bounds[i + 1]))
            grid = _grid(timestamps[rows], offset)
            found = grid.get_indexer(timestamps[rows]) if grid is not None else -np.ones(rows.stop - rows.start)
            off_grid[rows] = found < 0
            position[rows] = np.maximum(found, 0)
    lengths = position[bounds[1:] - 1] + 1  # (n_ids,) grid steps from each series' first to last timestamp
    rows_in = np.diff(bounds)  # (n_ids,) rows each series has
    sparse = np.flatnonzero(lengths > 2 * rows_in)
    if off_grid.any():
        i = int(np.flatnonzero(off_grid)[0])
        s = int(series[i])
        raise DataError(
            f"series {names[s]!r} is not on the {freq} grid of the other series: {timestamps[i]} at line {lines[i]} "
            f"(the series starts at {timestamps[int(bounds[s])]}); give every series the same frequency, "
            "or fill its gaps"
        )
    if len(sparse):
        s = int(sparse[0])
        first, last = timestamps[int(bounds[s])], timestamps[int(bounds[s + 1]) - 1]
        raise DataError(
            f"series {names[s]!r} is too sparse for the {freq} grid of the other series: {int(rows_in[s])} "
            f"rows over {int(lengths[s])} steps from {first} to {last} (more than half missing, as if it had another "
            "frequency); give every series the same frequency, or leave this one out"
        )
    new_bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rows = new_bounds[series] + position
    full = np.full((int(new_bounds[-1]), values.shape[1]), np.nan)
    full[rows] = values
    new_series = np.repeat(np.arange(len(names)), lengths)
    steps_in = np.arange(int(new_bounds[-1])) - new_bounds[new_series]
    if step is not None:
        nanos = starts_ns[new_series] + steps_in * step  # (n_rows,) ns since the epoch (UTC when tz-aware)
        grid = pd.DatetimeIndex(nanos.view("M8[ns]"), name=timestamps.name)
        if timestamps.tz is not None:
            grid = grid.tz_localize("UTC").tz_convert(timestamps.tz)
        grid = grid.as_unit(timestamps.unit)
    else:
        grid = timestamps[:0].append(
            [pd.date_range(timestamps[int(bounds[i])], periods=int(lengths[i]), freq=offset) for i in range(len(names))]
        )
    n_missing = int(new_bounds[-1]) - len(timestamps)
    notes = ()
    if n_missing:
        gappy = np.flatnonzero(lengths > np.diff(bounds))
        notes = (
            f"{n_missing} timestamp{'s' * (n_missing > 1)} missing from the {freq} grids of {len(gappy)} series "
            f"(first in {names[gappy[0]]!r}) became unobserved steps",
        )
    return grid, full, new_bounds, notes


def _one_offset(timestamps: pd.DatetimeIndex) -> bool:
    """Whether the timestamps keep one UTC offset (naive ones do), so that a step of fixed length lays their grid;
    across a daylight-saving switch a day is 23 or 25 hours, and each series' grid is laid out by the calendar."""
    if timestamps.tz is None:
        return True
    offsets = timestamps.tz_localize(None).as_unit("ns").asi8 - timestamps.as_unit("ns").asi8  # wall - UTC, ns
    return bool((offsets == offsets[0]).all()) if len(offsets) else True


def _irregular(timestamps: pd.DatetimeIndex, lines: np.ndarray, expected: str) -> DataError:
    """Name the first gap: a step that differs from the spacing of the first (or last) rows."""
    if expected:
        fix = f"fill the gap so rows are {expected} apart as in training"
    else:
        fix = "fill the gap or state the frequency with --freq"
    step = _guess_step(timestamps)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # offsets without a vectorised add
            off_step = np.flatnonzero((timestamps[:-1] + step) != timestamps[1:])
    except (ValueError, OverflowError):
        off_step = np.array([], dtype=int)
    if not len(off_step):
        return DataError(f"cannot infer the frequency of the timestamps (steps of {step.freqstr}); {fix}")
    i = int(off_step[0])
    return DataError(
        f"irregular spacing: a step of {timestamps[i + 1] - timestamps[i]} from {timestamps[i]} (line {lines[i]}) "
        f"to {timestamps[i + 1]} (line {lines[i + 1]}) where {step.freqstr} steps were expected; {fix}"
    )
