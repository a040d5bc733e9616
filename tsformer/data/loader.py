"""Reading a CSV into a validated, regularly spaced float32 series frame.

Every problem a user can fix becomes a DataError whose message says what is wrong, where
(column, line of the file) and how to fix it. While reading, a table's index is the line of
the file that holds each row (the header is line 1), so every message can name the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from tsformer.config import DataConfig
from tsformer.data.csvfile import names, read_table, table_from_frame
from tsformer.data.static import read_static, static_columns
from tsformer.data.timestamps import (
    ReadEvidence,
    TimeNotation,
    check_order,
    date_readings,
    fill_the_grid,
    fill_the_grids,
    find_time_col,
    join_year_and_part,
    parse_timestamps,
    pick_date_order,
    resolve_freq,
)
from tsformer.errors import DataError

ID_COL_NAMES = ("unique_id", "series_id", "item_id", "ts_id", "id")  # long format: the column naming each series
LONG_TARGET = "y"  # long format's usual target column (neuralforecast, statsforecast)
NA_TEXT = ("", "nan", "-nan", "na", "n/a", "#n/a", "null", "none")
FLOAT32_MAX = float(np.finfo(np.float32).max)
Source = str | Path | pd.DataFrame  # where series come from: a CSV path or a DataFrame (or a frame read already)


def as_source(data: object, what: str = "data") -> Source:
    """`data` as the Python API takes it: a DataFrame or a CSV path as it is, a pandas Series as a table of one
    series (its name the column, `y` when it has none; its index the time); anything else is refused."""
    if isinstance(data, pd.Series):
        return data.to_frame("y" if data.name is None else str(data.name))
    if not isinstance(data, str | Path | pd.DataFrame):
        raise DataError(f"{what} must be a DataFrame, a Series or a CSV path, got {type(data).__name__}")
    return data


@dataclass(frozen=True)
class SeriesFrame:
    """Regular series on one frequency: one float32 column per target, and the covariates by role.

    A wide file is one series (its columns share one clock). A long-format file holds many series,
    named by the id columns; their rows are stacked, series after series, each on its own regular
    grid in time order: series i owns rows bounds[i]:bounds[i + 1].
    """

    timestamps: pd.DatetimeIndex  # (n_rows,)
    values: np.ndarray  # (n_rows, n_columns) float32
    columns: tuple[str, ...]
    time_col: str
    freq: str
    observed: np.ndarray  # (n_rows, n_columns) bool: False where the CSV had no finite value (filled with --fill)
    notes: tuple[str, ...] = ()  # what the reader decided that the user should hear (date order, fills)
    id_cols: tuple[str, ...] = ()  # () for a wide file
    keys: tuple[tuple[str, ...], ...] = ((),)  # each series' id values, in the order of the file
    past_names: tuple[str, ...] = ()  # data.past_covs
    past: np.ndarray | None = None  # (n_rows, n_past) float32, NaN where missing
    future_names: tuple[str, ...] = ()  # data.future_covs
    future: np.ndarray | None = None  # (n_rows, n_future) float32, NaN where missing
    static: pd.DataFrame | None = None  # one row per series (in `keys` order), its static covariates as read
    static_from: str = ""  # where they came from: "table" (one row per series) or "data" (the data's own columns)
    time_notation: TimeNotation = TimeNotation()  # how the time column was written, to write output alike
    bounds: np.ndarray | None = None  # (n_ids + 1,) row where each series starts, then n_rows; None: one series
    reading: ReadEvidence | None = None  # what training's reading decisions rest on (`tsformer.data.reading`)
    id_values: pd.DataFrame | None = None  # one row per series (`keys` order): its ids with the DataFrame's dtypes
    # (int ids stay int, categories stay categories); None: read from a file, whose ids are text

    def __post_init__(self) -> None:
        if self.bounds is None:
            object.__setattr__(self, "bounds", np.array([0, len(self.timestamps)], dtype=np.int64))

    @property
    def n_rows(self) -> int:
        return len(self.timestamps)

    @property
    def n_ids(self) -> int:
        """How many series (1 for a wide file)."""
        return len(self.keys)

    @property
    def is_panel(self) -> bool:
        """Several series in long format (one series in long format is read as one series)."""
        return bool(self.id_cols) and self.n_ids > 1

    @property
    def names(self) -> tuple[str, ...]:
        """Each series' name: its id values joined by '/' ("" for a wide file)."""
        return tuple("/".join(key) for key in self.keys)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.bounds)

    def rows_of(self, i: int) -> slice:
        return slice(int(self.bounds[i]), int(self.bounds[i + 1]))

    @property
    def input_names(self) -> tuple[str, ...]:
        """The scaled inputs: the targets, then the past-only covariates, then the known-future ones."""
        return self.columns + self.past_names + self.future_names

    def inputs(self) -> np.ndarray:
        """(n_rows, n_columns + n_past + n_future) float32: targets (as filled), then the covariates by role;
        NaN where missing."""
        blocks = [b for b in (self.values, self.past, self.future) if b is not None]
        return blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=1)

    def ids_table(self, series: np.ndarray) -> pd.DataFrame:
        """The id columns of series `series` (an index array, one row each), typed as the data gave them."""
        if self.id_values is not None:
            return self.id_values.iloc[series].reset_index(drop=True)
        text = np.array(self.keys, dtype=object).reshape(self.n_ids, len(self.id_cols))  # (n_ids, n_id_cols)
        return pd.DataFrame(text[series], columns=list(self.id_cols))

    def id_of_rows(self) -> np.ndarray:
        """(n_rows,) the series index of every row."""
        return np.repeat(np.arange(self.n_ids), self.lengths)

    def with_rows(self, rows: np.ndarray, lengths: np.ndarray, **changes) -> SeriesFrame:
        """The frame of `rows` (an index or mask of its rows), series after series, series i `lengths[i]` of them
        (`changes`: other fields replaced with them)."""
        return replace(
            self,
            timestamps=self.timestamps[rows],
            values=self.values[rows],
            observed=self.observed[rows],
            past=None if self.past is None else self.past[rows],
            future=None if self.future is None else self.future[rows],
            bounds=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            **changes,
        )

    def through_last_value(self, fill: str) -> SeriesFrame:
        """The frame without each series' rows after its last row with a target value (timestamps with blank
        targets at the end, such as rows of covariates to come): what a forecast after the data starts from. With
        a --fill rule a blank means what the rule says, and every row stays."""
        seen = self.observed.any(axis=1)  # (n_rows,) a row with any target value
        if fill or seen[self.bounds[1:] - 1].all():
            return self
        starts = self.bounds[:-1]
        ends = np.array(
            [start + (np.flatnonzero(seen[start:end])[-1] + 1 if seen[start:end].any() else 0)
             for start, end in zip(starts, self.bounds[1:], strict=True)]
        )  # fmt: skip
        rows = np.concatenate([np.arange(start, end) for start, end in zip(starts, ends, strict=True)])
        return self.with_rows(rows, ends - starts)

    def in_series_order(self, keys: tuple[tuple[str, ...], ...]) -> SeriesFrame:
        """The same series in the order `keys` (a permutation of this frame's), as a run holds them: a long file
        sorted another way (by time, say) lists its series in another order of first appearance."""
        if keys == self.keys:
            return self
        position = {key: i for i, key in enumerate(self.keys)}
        return self.of_series(np.array([position[key] for key in keys]))

    def of_series(self, series: np.ndarray) -> SeriesFrame:
        """The frame of the series `series` (indexes), in that order."""
        rows = np.concatenate([np.arange(self.bounds[i], self.bounds[i + 1]) for i in series])
        return self.with_rows(
            rows,
            self.lengths[series],
            static=None if self.static is None else self.static.iloc[series].reset_index(drop=True),
            id_values=None if self.id_values is None else self.id_values.iloc[series].reset_index(drop=True),
            keys=tuple(self.keys[i] for i in series),
            reading=None,  # what training's reading decisions rest on is of the file's own order
        )


# how a number written as text starts: a sign or parenthesis, a currency sign, then a digit (or a decimal mark and one)
NUMBER_START = r"\s*[-+(]?\s*[$€£¥]?\s*[-+]?[.,]?\d"


def read_series(
    source: str | Path | pd.DataFrame,
    cfg: DataConfig,
    expected_freq: str = "",
    expected_ids: tuple[str, ...] | None = None,
    static: str | Path | pd.DataFrame | None = None,
) -> SeriesFrame:
    """Read a CSV file or a DataFrame, pick the time column, targets and covariates, check order, spacing and
    values.

    `expected_freq` (a trained model's frequency) must match the data's unless `cfg.freq` states one;
    `expected_ids` (a trained model's id columns) are taken as they are. The static covariates come from
    `static` (a table with one row per series), else `cfg.static_path`, else, as `cfg.static_covs` names
    them, from the data's own columns (constant in each series). A DataFrame's problems name its rows
    (0-based, as `df.iloc`); a file's name its lines.
    """
    if isinstance(source, pd.DataFrame):
        try:
            table = table_from_frame(source, cfg.time_col)
            frame = _read(table, "the DataFrame", "", cfg, expected_freq, expected_ids, static, typed_ids=True)
        except DataError as exc:
            raise DataError(rows_not_lines(str(exc))) from None
        return replace(frame, notes=tuple(rows_not_lines(note) for note in frame.notes))
    path = Path(source)
    table, delimiter, file_notes = read_table(path)
    return _read(table, path.name, delimiter, cfg, expected_freq, expected_ids, static, file_notes)


def _read(
    table: pd.DataFrame,
    name: str,
    delimiter: str,
    cfg: DataConfig,
    expected_freq: str,
    expected_ids: tuple[str, ...] | None,
    static: str | Path | pd.DataFrame | None,
    file_notes: tuple[str, ...] = (),
    typed_ids: bool = False,
) -> SeriesFrame:
    """read_series on a table whose index is the line of the file holding each row (`file_notes`: how the file
    was read into it; `typed_ids`: keep the id columns' values as the table types them, a DataFrame's)."""
    time_col, found_notes = find_time_col(table, cfg.time_col, name, cfg)
    found_notes = file_notes + found_notes
    table, joined_notes = join_year_and_part(table, time_col)
    found_notes += joined_notes
    id_by_values = ""
    if expected_ids is None:  # training: the id columns given, else found by name or by their values
        id_cols, id_notes = _find_id_cols(table, cfg.id_cols, time_col, name)
        found_notes += id_notes
        id_by_values = id_cols[0] if id_notes else ""
    else:  # a trained model's (none for a wide file): exactly those, whatever the names of the columns
        id_cols = _find_id_cols(table, expected_ids, time_col, name)[0] if expected_ids else ()
    codes, keys = _series_codes(table, id_cols, check_unique=expected_ids is None)
    id_values = None
    if typed_ids and id_cols:  # each series' first row's ids, in order of first appearance (the keys' order)
        id_values = table[list(id_cols)].iloc[np.unique(codes, return_index=True)[1]].reset_index(drop=True)
    raw_times = table[time_col]
    longest = int(np.bincount(codes).argmax())  # the series with the most rows: its dates show their order best
    date_sample = codes == longest
    timestamps, time_notes, notation = parse_timestamps(raw_times, time_col, cfg, sample=date_sample)
    time_notes = found_notes + time_notes
    static_source = static if static is not None else (cfg.static_path or None)
    in_table = () if static_source is not None else cfg.static_covs  # static columns of the data itself
    past_names, future_names = _pick_covariates(table, cfg, (time_col, *id_cols), name, in_table)
    covariate_names = past_names + future_names
    targets, target_notes, text_columns = _pick_targets(
        table, (time_col, *id_cols), cfg.targets, name, delimiter, covariate_names + in_table
    )
    # series after series (in the order they first appear), each in file order or, with --sort, in time order
    order = np.lexsort((timestamps.asi8, codes)) if cfg.sort else np.argsort(codes, kind="stable")
    table, timestamps, codes = table.iloc[order], timestamps[order], codes[order]
    bounds = np.searchsorted(codes, np.arange(len(keys) + 1)).astype(np.int64)
    names = tuple("/".join(key) for key in keys) if id_cols else ("",)
    lines = table.index.to_numpy()
    check_order(timestamps, lines, bounds, names)
    span = slice(int(bounds[longest]), int(bounds[longest + 1]))
    freq, freq_notes = resolve_freq(timestamps[span], cfg.freq, expected_freq, lines[span])
    evidence = None
    if expected_freq == "":  # training: keep what the decisions rest on, to make them from the training rows
        readings = date_readings(raw_times, cfg, date_sample)
        order = pick_date_order(readings, time_col, cfg) if readings and len(readings) > 1 else ""
        texts = {column: table[column] for column in text_columns}  # judged again on the training rows
        marks = {  # each text target of a file not delimited by commas: its decimal mark, decided again so
            column: table[column]
            for column in targets
            if delimiter not in ("", ",") and not pd.api.types.is_numeric_dtype(table[column])
        }
        evidence = ReadEvidence(
            longest,
            timestamps[span],
            lines[span],
            order,
            readings if order else None,
            id_by_values,
            texts,
            marks,
            codes if texts or marks else None,
            timestamps if texts or marks else None,
        )
    values, decimal_notes = _numeric_values(table, targets, delimiter)  # (n_rows, n_columns) float64, NaN: missing
    target_notes += decimal_notes
    if covariate_names:  # read and laid on the grid with the targets
        covariate_values, decimal_notes = _numeric_values(table, list(covariate_names), delimiter, "covariate")
        values = np.concatenate([values, covariate_values], 1)
        target_notes += decimal_notes
    if len(keys) == 1:
        timestamps, values, gap_notes = fill_the_grid(timestamps, values, freq)
        first_lines = lines[:1]
        bounds = np.array([0, len(timestamps)], dtype=np.int64)
    else:
        timestamps, values, bounds, gap_notes = fill_the_grids(timestamps, values, freq, bounds, names, lines)
        first_lines = lines[np.searchsorted(codes, np.arange(len(keys)))]
    past, future, covariate_notes = _covariates(values[:, len(targets) :], len(past_names), len(future_names))
    values, observed, value_notes = _complete(values[:, : len(targets)], targets, cfg.fill, bounds, first_lines, names)
    if static_source is not None:
        static_table = read_static(static_source, keys, id_cols, cfg.static_covs)
    else:
        static_table = static_columns(table, in_table, codes, names, id_cols) if in_table else None
    return SeriesFrame(
        timestamps=timestamps,
        values=values,
        columns=tuple(targets),
        time_col=time_col,
        freq=freq,
        observed=observed,
        notes=time_notes + target_notes + freq_notes + gap_notes + value_notes + covariate_notes,
        id_cols=id_cols,
        keys=keys,
        bounds=bounds,
        past_names=past_names,
        past=past,
        future_names=future_names,
        future=future,
        static=static_table,
        static_from="" if static_table is None else "data" if in_table else "table",
        time_notation=notation,
        reading=evidence,
        id_values=id_values,
    )


# --- series ids -----------------------------------------------------------------------------------


def _find_id_cols(
    table: pd.DataFrame, requested: tuple[str, ...], time_col: str, source: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The long format's id columns and a note when they were found by their values: as given (--id-col), else
    the first of ID_COL_NAMES present, else `_id_col_by_values`, else () (a wide file)."""
    for i, name in enumerate(requested):
        if name not in table.columns:
            raise DataError(f"id column {name!r} not in {source}; columns are: {names(table.columns)}")
        if name == time_col:
            raise DataError(f"id column {name!r} is the time column; name the column that identifies each series")
        if name in requested[:i]:
            raise DataError(f"id column {name!r} is given twice; give each --id-col once")
    if requested:
        return tuple(requested), ()
    by_lower = {str(column).lower(): column for column in table.columns if column != time_col}
    named = next(((by_lower[name],) for name in ID_COL_NAMES if name in by_lower), ())
    if named:
        return named, ()
    found, n_series = _id_col_by_values(table, time_col)
    if not found:
        return (), ()
    return (found,), (
        f"took {found!r} as the series id column: the time column repeats its timestamps, and {found!r}, the first "
        f"text column, gives each of its {n_series} series one row per timestamp (--id-col names others)",
    )


def _id_col_by_values(table: pd.DataFrame, time_col: str) -> tuple[str, int]:
    """The first text column and its number of series, when the time column repeats a timestamp and that column
    tells every row apart (one row per value and timestamp); else ("", 0). Only the first is tried: rows after the
    training rows can then refuse the file (a repeated timestamp with no id), never choose another column to split
    its series by. Where it tells all but a few rows apart, the first of those is refused by its series and lines
    (a row written twice), not by the repeat of a timestamp across two series."""
    times = table[time_col].astype(str).str.strip()
    if not times.duplicated().any():
        return "", 0
    text = [c for c in table.columns if c != time_col and not is_numeric_like(table[c])]
    if not text or table[text[0]].isna().any():
        return "", 0
    ids = table[text[0]].astype(str).str.strip()
    repeated = pd.DataFrame({"id": ids, "time": times}).duplicated().to_numpy()
    at = times[repeated]  # a second id column repeats (value, time) at most times; a row written twice at few
    stray = repeated.any() and at.nunique() <= max(1, 0.01 * times.nunique()) and ids.nunique() > 1
    if stray and times.duplicated().mean() >= 1 / 3:  # series that share their timestamps, a row written twice
        second = int(np.flatnonzero(repeated)[0])
        first = int(np.flatnonzero((ids == ids.iloc[second]).to_numpy() & (times == times.iloc[second]).to_numpy())[0])
        raise DataError(
            f"duplicate timestamp {times.iloc[second]} for {text[0]} {ids.iloc[second]!r} at lines "
            f"{table.index[first]} and {table.index[second]}; keep one row per series and timestamp (--id-col names "
            "the columns that tell the series apart, if that is not the only one)"
        )
    if repeated.any():
        return "", 0
    return str(text[0]), ids.nunique()


def _series_codes(
    table: pd.DataFrame, id_cols: tuple[str, ...], check_unique: bool = True
) -> tuple[np.ndarray, tuple[tuple[str, ...], ...]]:
    """Each row's series index (in order of first appearance) and each series' id values as text.

    With `check_unique`, an id column with a different value on every row is an error (training: every
    series would be one row); a file of a model's known ids (a --future file, one row per series) is not."""
    if not id_cols:
        return np.zeros(len(table), dtype=np.int64), ((),)
    parts = []
    for name in id_cols:
        column = table[name]
        missing = column.isna().to_numpy()
        if missing.any():
            raise DataError(
                f"empty id in id column {name!r} at line {column.index[missing][0]}; every row needs its series' id"
            )
        text = column.astype(str).str.strip()
        n_distinct = text.nunique()
        if check_unique and n_distinct == len(text) and len(text) > 2:
            raise DataError(
                f"id column {name!r} has a different value on each of the {len(text)} rows, so every series would be "
                "one row; name the column that identifies each series with --id-col"
            )
        parts.append(text.to_numpy(dtype=object))
    joined = parts[0] if len(parts) == 1 else np.array(["\x1f".join(values) for values in zip(*parts, strict=True)])
    codes, uniques = pd.factorize(joined)
    keys = tuple(tuple(str(u).split("\x1f")) if len(parts) > 1 else (str(u),) for u in uniques)
    return codes.astype(np.int64), keys


# ---  -------------------------------------------------------------------------------------


def _pick_covariates(
    table: pd.DataFrame, cfg: DataConfig, not_covariates: tuple[str, ...], source: str, static: tuple[str, ...] = ()
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """data.past_covs and data.future_covs: each a column of the data that is no id, time, target, static or
    other covariate."""
    given = (*cfg.past_covs, *cfg.future_covs)
    for i, name in enumerate(given):
        if name not in table.columns:
            raise DataError(f"covariate {name!r} not in {source}; columns are: {names(table.columns)}")
        if name in not_covariates:
            raise DataError(f"covariate {name!r} is the time or an id column; name a column of values")
        if name in given[:i]:
            raise DataError(f"covariate {name!r} is given twice; give each covariate once, as past-only or future")
        if name in cfg.targets:
            raise DataError(f"column {name!r} is both a target and a covariate; give it as one of them")
        if name in static:
            raise DataError(f"column {name!r} is both a static and a time-varying covariate; give it as one of them")
    return tuple(cfg.past_covs), tuple(cfg.future_covs)


def _pick_targets(
    table: pd.DataFrame,
    not_targets: tuple[str, ...],
    requested: tuple[str, ...],
    source: str,
    delimiter: str,
    covariates: tuple[str, ...] = (),
) -> tuple[list[str], tuple[str, ...], tuple[str, ...]]:
    """The target columns, a note when a long file's `y` was chosen over other numeric columns, and the columns
    that would have been default targets had they not read as text (none when targets are named).

    `not_targets` are the time column, then the id columns; covariates (static ones too) are not targets."""
    time_col, id_cols = not_targets[0], not_targets[1:]
    candidates = [c for c in table.columns if c not in not_targets and c not in covariates]
    if requested:
        for i, name in enumerate(requested):
            if name == time_col:
                raise DataError(f"target column {name!r} is the time column; choose among: {names(candidates)}")
            if name in id_cols:
                raise DataError(f"target column {name!r} is an id column; choose among: {names(candidates)}")
            if name in covariates:
                raise DataError(f"target column {name!r} is also a covariate; give it as one of them")
            if name not in table.columns:
                raise DataError(f"target column {name!r} not in {source}; columns are: {names(candidates)}")
            if name in requested[:i]:
                raise DataError(f"target column {name!r} is given twice; give each --target once")
        return list(requested), (), ()
    if id_cols and LONG_TARGET in covariates:
        raise DataError(
            f"column {LONG_TARGET!r}, the long format's target, is given as a covariate; name the columns to "
            f"forecast with --target, or give {LONG_TARGET!r} as the target and not as a covariate"
        )
    numeric = [c for c in candidates if is_numeric_like(table[c])]
    text = tuple(c for c in candidates if c not in numeric)
    taken = [c for c in table.columns if c in covariates and is_numeric_like(table[c])]  # in the file's order
    if not numeric and taken:
        raise DataError(
            f"every numeric column of {source} is given as a covariate ({names(taken)}), so none is left to "
            "forecast; a covariate is an input beside the target, not the target itself: drop it from the "
            "covariates, or add the column to forecast"
        )
    if not numeric:
        raise DataError(
            f"no numeric column in {source} besides the time column {time_col!r} ({_read_with(delimiter)}columns: "
            f"{names(candidates)}); add a column of numbers"
        )
    if id_cols and LONG_TARGET in numeric and len(numeric) > 1:
        others = [c for c in numeric if c != LONG_TARGET]
        return (
            [LONG_TARGET],
            (
                f"forecasting {LONG_TARGET!r}, the long format's target; {names(others)} are not used (name targets "
                "with --target)",
            ),
            (),
        )  # with `y` present no other column is a default target
    if text and not id_cols:  # a wide file: a column of text is no target, which its user may not expect
        return numeric, (f"left out of the targets the text column{'s' * (len(text) > 1)} {names(text)}",), text
    return numeric, (), text


def is_numeric_like(column: pd.Series) -> bool:
    """Numeric dtype, or text cells that mostly start as numbers do ("1,234", "12 %", "$5", "(3)", "-.5": then
    parsing says what is wrong); cells that start with a letter are text, digits or not ("H1", "SKU123", "S0":
    series ids)."""
    if pd.api.types.is_bool_dtype(column):
        return False
    if pd.api.types.is_numeric_dtype(column):
        return True
    sample = column.dropna().astype(str).head(1000)
    return bool(len(sample)) and sample.str.match(NUMBER_START).mean() > 0.5


def _numeric_values(
    table: pd.DataFrame, targets: list[str], delimiter: str, kind: str = "target"
) -> tuple[np.ndarray, tuple[str, ...]]:
    """(n_rows, n_series) float64 values, NaN where a cell is missing or infinite, and a note naming the columns
    written with decimal commas (`decimal_comma`)."""
    values = np.empty((len(table), len(targets)))
    lines = table.index
    commas = []
    for j, name in enumerate(targets):
        try:
            text = table[name]
            if decimal_comma(text, delimiter):
                commas.append(name)
                text = _with_decimal_points(text, name)
            column = _to_float(text, name, delimiter)
        except DataError as exc:
            if kind == "target":
                raise
            raise DataError(
                f"covariate {str(exc).split('; ')[0].removeprefix('column ')}; a past-only or known-future "
                "covariate must be numeric (a category that is constant per series is a static covariate: "
                "--static-cov): encode it as numbers or leave it out"
            ) from None
        too_big = np.isfinite(column) & (np.abs(column) > FLOAT32_MAX)
        if too_big.any():
            row = int(np.flatnonzero(too_big)[0])
            raise DataError(
                f"column {name!r} has a value too large for float32 ({column[row]:g} at line {lines[row]}); "
                "rescale the column, for example to thousands"
            )
        values[:, j] = np.where(np.isfinite(column), column, np.nan)
    if not commas:
        return values, ()
    return values, (
        f"read {names(commas)} with decimal commas (1.234,5 is 1234.5), as their first cell with a decimal mark writes "
        f"them and the delimiter {delimiter!r} allows",
    )


EUROPEAN_NUMBER = r"[-+]?(?:\d{1,3}(?:\.\d{3})+|\d+)(?:,\d+)?"  # 1.234,5 or 1234,5 or 12
MARKED = r".*\d[.,]\d.*"  # a cell with a decimal mark (or a thousands point) between digits


def decimal_comma(column: pd.Series, delimiter: str) -> bool:
    """Whether a text column of a file not delimited by commas writes decimals with a comma, as European
    spreadsheets do: its first cell with a mark between digits has a comma there and reads as such a number.
    The first such cell decides, so later rows can only conform or be refused, never change how earlier ones
    read (1.234 is 1234 after 5,5 and 1.234 before it)."""
    if delimiter in ("", ",") or pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column):
        return False
    text = column.dropna().astype(str).str.strip()
    marked = text[text.str.fullmatch(MARKED)]
    return bool(len(marked)) and "," in marked.iloc[0] and bool(re.fullmatch(EUROPEAN_NUMBER, marked.iloc[0]))


def _with_decimal_points(column: pd.Series, name: str) -> pd.Series:
    """Cells of a decimal-comma column as plain numbers (1.234,5 -> 1234.5), missing markers kept; a DataError
    names the first cell written otherwise."""
    text = column.astype("string").str.strip()
    european = text.str.fullmatch(EUROPEAN_NUMBER).fillna(False)
    missing = text.isna() | text.str.lower().isin(NA_TEXT).fillna(True)
    other = (~european & ~missing).to_numpy()
    if other.any():
        row = int(np.flatnonzero(other)[0])
        raise DataError(
            f"column {name!r} writes decimals with commas (as its first cell with a decimal mark does) but "
            f"{column.iloc[row]!r} at line {column.index[row]} does not; write every number of it alike"
        )
    return text.str.replace(".", "", regex=False).str.replace(",", ".", regex=False)


def _complete(
    values: np.ndarray,
    targets: list[str],
    fill: str,
    bounds: np.ndarray,
    first_lines: np.ndarray,
    names: tuple[str, ...],
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """float32 values, the mask of cells the data gave (True), and notes: missing cells are filled with
    --fill (each series from its own earlier rows), or else stay NaN as unobserved cells (masked in the
    model's inputs, the loss and the metrics)."""
    observed = ~np.isnan(values)
    counts = {}  # column -> its missing cells
    for j, name in enumerate(targets):
        missing = ~observed[:, j]
        if not missing.any():
            continue
        if missing.all():
            raise DataError(f"column {name!r} has no value at all; drop it or choose other --target columns")
        counts[name] = int(missing.sum())
        if fill:
            _check_fillable(missing, fill, name, bounds, first_lines, names)
            for i in range(len(bounds) - 1):
                rows = slice(int(bounds[i]), int(bounds[i + 1]))
                values[rows, j] = fill_column(values[rows, j], fill)
    if not counts:
        return values.astype(np.float32), observed, ()
    total = sum(counts.values())
    where = (
        f"of {next(iter(counts))!r}"
        if len(counts) == 1
        else f"({', '.join(f'{n} of {name!r}' for name, n in counts.items())})"
    )
    if fill:
        note = f"filled {total} missing or infinite cells {where} with --fill {fill}"
    else:
        note = (
            f"{total} missing or infinite cells {where} are unobserved: masked in the inputs, the loss and the "
            "metrics (or pass --fill ffill or zero)"
        )
    return values.astype(np.float32), observed, (note,)


def require_values(frame: SeriesFrame, fill: str) -> None:
    """Refuse a series (long format) with no value in any target column: nothing to forecast it from (a series
    missing one column of several is scaled with every series' statistics instead); with --fill zero its
    missing values are zeros, as asked."""
    if fill == "zero" or frame.n_ids == 1:
        return
    empty = np.flatnonzero(~np.logical_or.reduceat(frame.observed.any(axis=1), frame.bounds[:-1]))  # (n_ids,)
    if len(empty):
        more = f" (and {len(empty) - 1} more series)" if len(empty) > 1 else ""
        raise DataError(
            f"series {frame.names[empty[0]]!r} has no value at all{more}: nothing to forecast it from; drop its "
            "rows, or train with --fill zero where a missing value means zero"
        )


def _covariates(values: np.ndarray, n_past: int, n_future: int) -> tuple[np.ndarray | None, np.ndarray | None, tuple]:
    """The past-only, then the known-future covariates' columns of `values` (None for a role with none), float32,
    NaN where missing, and a note counting the missing cells."""
    past = values[:, :n_past].astype(np.float32) if n_past else None
    future = values[:, n_past : n_past + n_future].astype(np.float32) if n_future else None
    missing = int(np.isnan(values).sum())
    note = f"{missing} covariate cells are missing; the model reads them as unobserved (the training mean)"
    return past, future, (note,) if missing else ()


def _check_fillable(
    missing: np.ndarray, fill: str, name: str, bounds: np.ndarray, first_lines: np.ndarray, names: tuple[str, ...]
) -> None:
    """ffill needs each series to start with a value."""
    if fill != "ffill":
        return
    leading = np.flatnonzero(missing[bounds[:-1]])
    if not len(leading):
        return
    i = int(leading[0])
    rows = missing[int(bounds[i]) : int(bounds[i + 1])]
    n_leading = int(np.argmin(rows)) if not rows.all() else len(rows)
    where = f"series {names[i]!r} of " if names[i] else ""
    raise DataError(
        f"{where}column {name!r} starts with {n_leading} missing or infinite value{'s' * (n_leading > 1)} (from line "
        f"{first_lines[i]}); --fill ffill fills only from earlier rows: drop those rows, or pass --fill zero"
    )


def fill_column(column: np.ndarray, method: str) -> np.ndarray:
    """NaNs filled from the same and earlier rows only (ffill: the last value before; zero: 0.0).

    Causal by construction: row t's filled value never depends on a row after t.
    """
    if method == "zero":
        return np.nan_to_num(column, nan=0.0)
    if method == "ffill":
        return pd.Series(column).ffill().to_numpy()
    raise ValueError(f"unknown fill method {method!r}")


def _to_float(column: pd.Series, name: str, delimiter: str) -> np.ndarray:
    """float64 copy of the column; text that is neither a number nor a missing marker is an error."""
    if pd.api.types.is_bool_dtype(column):
        raise DataError(f"column {name!r} holds true/false values, not numbers; choose numeric --target columns")
    if pd.api.types.is_numeric_dtype(column):
        return np.array(column.to_numpy(dtype=np.float64, na_value=np.nan))
    text = column.astype("string").str.strip()
    parsed = pd.to_numeric(text, errors="coerce")
    unparsed = (parsed.isna() & column.notna() & ~text.str.lower().isin(NA_TEXT)).to_numpy()
    if unparsed.any():
        row = int(np.flatnonzero(unparsed)[0])
        cell = str(column.iloc[row]).strip()
        decimal = " (write decimals with '.')" if delimiter == ";" and "," in cell else ""
        fix = (
            "a missing value is an empty cell or NA"
            if not re.search(r"\d", cell)  # a word, perhaps a missing marker: not a number written otherwise
            else f"remove thousands separators and units{decimal}"
        )
        raise DataError(
            f"column {name!r} is not numeric: {column.iloc[row]!r} at line {column.index[row]}"
            f"{' (' + _read_with(delimiter).removesuffix(', ') + ')' if delimiter else ''}; {fix}, or choose other "
            "--target columns"
        )
    return np.array(parsed.to_numpy(dtype=np.float64, na_value=np.nan))


def _read_with(delimiter: str) -> str:
    """ "read with delimiter ';', " for a file's messages; "" for a DataFrame's."""
    return f"read with delimiter {delimiter!r}, " if delimiter else ""


def rows_not_lines(message: str) -> str:
    """A message about a DataFrame, whose rows were numbered as the lines of the CSV it would write (the header
    is line 1): "line 7" becomes "row 5" (0-based, as df.iloc), "lines 7 and 8" "rows 5 and 6"."""
    message = re.sub(r"\blines (\d+) and (\d+)", lambda m: f"rows {int(m[1]) - 2} and {int(m[2]) - 2}", message)
    return re.sub(r"\bline (\d+)", lambda m: f"row {int(m[1]) - 2}", message)
