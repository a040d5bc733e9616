"""Reading a CSV into a validated, regularly spaced float32 series frame.

Every problem a user can fix becomes a DataError whose message says what is wrong, where
(column, line of the file) and how to fix it.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.tseries.frequencies import to_offset

from tsformer.config import DataConfig
from tsformer.errors import DataError

TIME_COL_NAMES = ("date", "timestamp", "time", "datetime", "ds", "period", "dt")
DELIMITERS = ",;\t|"
SNIFF_BYTES = 64 * 1024


@dataclass(frozen=True)
class SeriesFrame:
    """Regular series: one timestamp per row, one float32 column per target."""

    timestamps: pd.DatetimeIndex
    values: np.ndarray  # (n_rows, n_series) float32
    columns: tuple[str, ...]
    time_col: str
    freq: str
    filled: dict[str, int] = field(default_factory=dict)  # cells filled per column

    @property
    def n_rows(self) -> int:
        return len(self.timestamps)


def read_series(path: str | Path, cfg: DataConfig, expected_freq: str = "") -> SeriesFrame:
    """Read `path`, pick the time column and targets, check order, spacing and values."""
    path = Path(path)
    table = _read_table(path)
    time_col = _find_time_col(table, cfg.time_col, path)
    timestamps = _parse_timestamps(table[time_col], time_col)
    targets = _pick_targets(table, time_col, cfg.targets)
    if cfg.sort:
        order = np.argsort(timestamps.to_numpy(), kind="stable")
        table, timestamps = table.iloc[order], timestamps[order]
    _check_order(timestamps, table.index.to_numpy())
    freq = _resolve_freq(timestamps, cfg.freq or expected_freq, table.index.to_numpy(), strict=not cfg.freq)
    values, filled = _numeric_values(table, targets, cfg.fill)
    return SeriesFrame(
        timestamps=pd.DatetimeIndex(timestamps),
        values=values,
        columns=tuple(targets),
        time_col=time_col,
        freq=freq,
        filled=filled,
    )


def _line(row_index: int) -> int:
    """Line of the file holding data row `row_index` (the header is line 1)."""
    return int(row_index) + 2


def _read_table(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise DataError(f"file {path} not found; check the path")
    if not path.is_file():
        raise DataError(f"{path} is not a file; give the path of a CSV file")
    try:
        with path.open("rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError as exc:
        raise DataError(f"cannot read {path} ({exc.strerror}); check its permissions") from None
    if not head.strip():
        raise DataError(f"{path} is empty; give a CSV with a header row and data rows")
    if b"\x00" in head:
        raise DataError(f"{path} is not a text CSV (it holds binary data); export the data as CSV")
    try:
        text = head.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not merely a character cut at the sniff boundary
            raise DataError(f"{path} is not UTF-8 text; save it as a UTF-8 CSV") from None
        text = head[: exc.start].decode("utf-8-sig")
    delimiter = _sniff_delimiter(text)
    try:
        table = pd.read_csv(path, sep=delimiter, skipinitialspace=True, encoding="utf-8-sig", low_memory=False)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path} is empty; give a CSV with a header row and data rows") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise DataError(f"{path} is not a readable CSV with delimiter {delimiter!r} ({detail}); fix the file") from None
    if table.shape[1] < 2:
        raise DataError(
            f"{path} has only {table.shape[1]} column with delimiter {delimiter!r}; a CSV needs a time column "
            "and at least one numeric column separated by ',', ';', tab or '|'"
        )
    if len(table) == 0:
        raise DataError(f"{path} has a header but no data rows; add rows below the header")
    table.columns = [str(c).strip() for c in table.columns]
    duplicated = table.columns[table.columns.duplicated()]
    if len(duplicated):
        raise DataError(f"{path} has the column name {duplicated[0]!r} twice; give each column a unique name")
    return table.reset_index(drop=True)


def _sniff_delimiter(text: str) -> str:
    lines = [line for line in text.splitlines()[:50] if line.strip()]
    if len(lines) > 1 and not text.endswith("\n"):
        lines = lines[:-1]  # the last sniffed line may be cut short
    try:
        return csv.Sniffer().sniff("\n".join(lines), delimiters=DELIMITERS).delimiter
    except csv.Error:
        counts = {d: lines[0].count(d) for d in DELIMITERS} if lines else {}
        best = max(counts, key=counts.get, default=",")
        return best if counts.get(best) else ","


def _find_time_col(table: pd.DataFrame, requested: str, path: Path) -> str:
    if requested:
        if requested not in table.columns:
            raise DataError(
                f"time column {requested!r} not in {path.name}; columns are: {', '.join(table.columns)}"
            )
        return requested
    for column in table.columns:
        if column.lower() in TIME_COL_NAMES:
            return column
    raise DataError(
        f"no time column found in {path.name} (looked for {', '.join(TIME_COL_NAMES)}); "
        "name it with --time-col"
    )


def _parse_timestamps(column: pd.Series, name: str) -> pd.DatetimeIndex:
    missing = column.isna().to_numpy()
    if missing.any():
        row = int(np.flatnonzero(missing)[0])
        raise DataError(f"time column {name!r} is empty at line {_line(row)}; every row needs a timestamp")
    parsed = pd.to_datetime(column, errors="coerce")
    if parsed.isna().any():
        parsed = pd.to_datetime(column, errors="coerce", format="mixed")
    bad = parsed.isna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"cannot parse {column.iloc[row]!r} in time column {name!r} at line {_line(row)} as a date; "
            "use one date format such as 2024-01-31 13:00"
        )
    if getattr(parsed.dt, "tz", None) is not None:
        parsed = parsed.dt.tz_convert(None)
    return pd.DatetimeIndex(parsed)


def _check_order(timestamps: pd.DatetimeIndex, rows: np.ndarray) -> None:
    steps = np.diff(timestamps.asi8)
    if (steps > 0).all():
        return
    i = int(np.flatnonzero(steps <= 0)[0])
    first, second = timestamps[i], timestamps[i + 1]
    if steps[i] == 0:
        raise DataError(
            f"duplicate timestamp {second} at lines {_line(rows[i])} and {_line(rows[i + 1])}; "
            "keep one row per timestamp"
        )
    raise DataError(
        f"timestamps decrease at line {_line(rows[i + 1])} ({second} after {first}); "
        "sort the file by time or pass --sort"
    )


def _resolve_freq(timestamps: pd.DatetimeIndex, stated: str, rows: np.ndarray, strict: bool) -> str:
    """The stated frequency (checked to be a valid alias) or the one inferred from regular spacing."""
    if stated:
        try:
            offset = to_offset(stated)
        except ValueError:
            raise DataError(f"--freq {stated!r} is not a pandas frequency such as h, D, W-SUN or 15min") from None
        if not strict:
            return offset.freqstr
    if len(timestamps) < 3:
        if stated:
            return to_offset(stated).freqstr
        raise DataError("need at least 3 rows to infer the frequency; add rows or pass --freq")
    inferred = pd.infer_freq(timestamps)
    if inferred is not None:
        inferred_offset = to_offset(inferred)
        if stated and inferred_offset != to_offset(stated):
            raise DataError(
                f"the data's frequency is {inferred_offset.freqstr} but the model was trained on "
                f"{to_offset(stated).freqstr} data; give a CSV with the training frequency"
            )
        return inferred_offset.freqstr
    steps = np.diff(timestamps.asi8)
    values, counts = np.unique(steps, return_counts=True)
    usual = values[np.argmax(counts)]
    odd = np.flatnonzero(steps != usual)
    i = int(odd[0]) if len(odd) else 0
    raise DataError(
        f"irregular spacing: {timestamps[i + 1] - timestamps[i]} between {timestamps[i]} (line {_line(rows[i])}) "
        f"and {timestamps[i + 1]} (line {_line(rows[i + 1])}) while most steps are {pd.Timedelta(int(usual))}; "
        "fill the gap or state the frequency with --freq"
    )


def _pick_targets(table: pd.DataFrame, time_col: str, requested: tuple[str, ...]) -> list[str]:
    candidates = [c for c in table.columns if c != time_col]
    if requested:
        for name in requested:
            if name not in table.columns or name == time_col:
                raise DataError(f"target column {name!r} not found; numeric columns are: {', '.join(candidates)}")
        return list(requested)
    numeric = [c for c in candidates if _is_numeric_like(table[c])]
    if not numeric:
        raise DataError(f"no numeric column besides the time column {time_col!r}; add a column of numbers")
    return numeric


def _is_numeric_like(column: pd.Series) -> bool:
    """Numeric dtype, or text cells that mostly hold digits (then parsing will say what is wrong)."""
    if pd.api.types.is_bool_dtype(column):
        return False
    if pd.api.types.is_numeric_dtype(column):
        return True
    sample = column.dropna().astype(str).head(1000)
    return bool(len(sample)) and sample.str.contains(r"\d").mean() > 0.5


def _numeric_values(table: pd.DataFrame, targets: list[str], fill: str) -> tuple[np.ndarray, dict[str, int]]:
    values = np.empty((len(table), len(targets)), dtype=np.float32)
    filled: dict[str, int] = {}
    for j, name in enumerate(targets):
        column = _to_float(table[name], name)
        bad = ~np.isfinite(column)
        if bad.any():
            if not fill:
                row = int(np.flatnonzero(bad)[0])
                kind = "missing" if np.isnan(column[row]) else "infinite"
                raise DataError(
                    f"column {name!r} has a {kind} value at line {_line(table.index[row])} "
                    f"({int(bad.sum())} such cells); fix the data or pass --fill ffill, interpolate or zero"
                )
            column = _fill(column, bad, fill, name)
            filled[name] = int(bad.sum())
        values[:, j] = column
    return values, filled


def _to_float(column: pd.Series, name: str) -> np.ndarray:
    if pd.api.types.is_bool_dtype(column):
        raise DataError(f"column {name!r} holds true/false values, not numbers; choose numeric --target columns")
    if pd.api.types.is_numeric_dtype(column):
        return column.to_numpy(dtype=np.float64, na_value=np.nan)
    parsed = pd.to_numeric(column, errors="coerce")
    text = column.astype("string").str.strip().str.lower()
    unparsed = parsed.isna() & column.notna() & ~text.isin(["", "nan", "na", "n/a", "null", "none", "inf", "-inf"])
    if unparsed.any():
        row = int(np.flatnonzero(unparsed.to_numpy())[0])
        raise DataError(
            f"column {name!r} is not numeric: {column.iloc[row]!r} at line {_line(column.index[row])}; "
            "remove thousands separators and units, or choose other --target columns"
        )
    result = parsed.to_numpy(dtype=np.float64, na_value=np.nan)
    result[text.isin(["inf"]).to_numpy()] = np.inf
    result[text.isin(["-inf"]).to_numpy()] = -np.inf
    return result


def _fill(column: np.ndarray, bad: np.ndarray, method: str, name: str) -> np.ndarray:
    if bad.all():
        raise DataError(f"column {name!r} has no finite value to fill from; drop it or choose other --target columns")
    series = pd.Series(np.where(bad, np.nan, column))
    if method == "zero":
        series = series.fillna(0.0)
    elif method == "ffill":
        series = series.ffill().bfill()
    else:
        series = series.interpolate(limit_direction="both")
    return series.to_numpy()
