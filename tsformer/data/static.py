"""Static covariates: one value per series (a product's category, a meter's size), constant in time.

They come from a table with one row per series (`--static CSV`, the API's `static_df`), or from
columns of the data itself that hold one value per series (`--static-cov COL`); a column that varies
within a series is refused. Roles, categories and scales are decided on the series that exist by the
training end (`prepare.existing_by_training_end`; `data/static` checks it): a numeric one is standardised
over them; a categorical one (any column that is not all numbers in them) becomes a code, 1.. for the
categories they hold and 0 for any other. They describe a series, not a time, so the model may read them
at every step; a value computed from a series' later rows (its overall mean, say) would still leak, which
no check can see, so compute them from what is known before the forecast.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tsformer.data.csvfile import names, read_table, table_from_frame
from tsformer.errors import DataError

WIDE = (
    "static covariates describe each series of a long-format file (one row per series and time, named by an "
    "id column); this data is one series: name its id column with --id-col, or drop the static covariates"
)


def read_static(
    source: str | Path | pd.DataFrame, keys: tuple[tuple[str, ...], ...], id_cols: tuple[str, ...], wanted: tuple
) -> pd.DataFrame:
    """The static covariates of each series of `keys` from a table with one row per series: `wanted` columns, or
    every column but the id columns. One row per series (in `keys` order), numbers as float64, categories as
    text."""
    if not id_cols:
        raise DataError(WIDE)
    where = "the static table" if isinstance(source, pd.DataFrame) else f"static file {Path(source).name}"
    table = table_from_frame(source) if isinstance(source, pd.DataFrame) else read_table(Path(source))[0]
    absent = [c for c in (*id_cols, *wanted) if c not in table.columns]
    if absent:
        raise DataError(f"{where} has no column {absent[0]!r}; its columns are: {names(table.columns)}")
    chosen = tuple(wanted) or tuple(c for c in table.columns if c not in id_cols)
    if not chosen:
        raise DataError(f"{where} holds only the id columns {names(id_cols)}; add a column per static covariate")
    text = [table[c].astype(str).str.strip() for c in id_cols]
    row_keys = list(zip(*text, strict=True))
    first: dict[tuple[str, ...], int] = {}
    for line, key in zip(table.index, row_keys, strict=True):
        if key in first:
            raise DataError(
                f"{where} has two rows for series {'/'.join(key)!r} (lines {first[key]} and {line}); give one row per "
                "series"
            )
        first[key] = line
    missing = [key for key in keys if key not in first]
    if missing:
        raise DataError(
            f"{where} has no row for series {'/'.join(missing[0])!r} ({len(missing)} of {len(keys)} series lack one); "
            "give every series its static values"
        )
    rows = table.loc[[first[key] for key in keys], list(chosen)]
    return _typed(rows, where)


def static_columns(
    table: pd.DataFrame, wanted: tuple[str, ...], codes: np.ndarray, series: tuple[str, ...], id_cols: tuple
) -> pd.DataFrame:
    """The data's own columns `wanted` as static covariates: each must hold one value in each series (`codes`
    (n_rows,) names each row's series, grouped, `series` their names): its first row's, which later rows may
    leave blank (the rows ahead of a long file often do), never a value written only later (a test row's). One
    row per series."""
    if not id_cols:
        raise DataError(WIDE)
    first = np.searchsorted(codes, np.arange(len(series)))  # each series' first row: rows are grouped by series
    for name in wanted:
        if name not in table.columns:
            raise DataError(f"static covariate {name!r} is not a column; columns are: {names(table.columns)}")
        column = table[name]
        text = column.astype(str).str.strip().where(column.notna())
        distinct = text.groupby(codes).nunique()
        varying = np.flatnonzero(distinct.to_numpy() > 1)
        if len(varying):
            i = int(distinct.index[varying[0]])
            values = text[(codes == i) & text.notna().to_numpy()]
            other = values[values != values.iloc[0]]
            raise DataError(
                f"static covariate {name!r} varies within series {series[i]!r} ({values.iloc[0]!r} at line "
                f"{values.index[0]}, {other.iloc[0]!r} at line {other.index[0]}); a static covariate holds one value "
                "per series: give a time-varying one as --past-cov or --future-cov"
            )
        blank = np.flatnonzero(column.iloc[first].isna().to_numpy())
        if len(blank):
            i = int(blank[0])
            raise DataError(
                f"static covariate {name!r} has no value in the first row of series {series[i]!r} (line "
                f"{table.index[first[i]]}); write each series' value in its first row at least (later rows may "
                "leave it blank)"
            )
    return _typed(table.iloc[first][list(wanted)], "the data")


def _typed(rows: pd.DataFrame, where: str) -> pd.DataFrame:
    """Numbers as float64 where every value of a column is one, the rest as text; a missing value is an error."""
    out = {}
    for name in rows.columns:
        column = rows[name]
        if column.isna().any():
            raise DataError(
                f"static covariate {name!r} has no value in {where} at line {column.index[column.isna()][0]}; give "
                "every series a value"
            )
        numbers = None if pd.api.types.is_bool_dtype(column) else pd.to_numeric(column, errors="coerce")
        numeric = numbers is not None and not numbers.isna().any() and np.isfinite(numbers.to_numpy(float)).all()
        out[name] = numbers.astype(np.float64).to_numpy() if numeric else column.astype(str).str.strip().to_numpy()
    return pd.DataFrame(out, columns=list(rows.columns))


def static_roles(
    table: pd.DataFrame, trained: np.ndarray
) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """The numeric static covariates, and each categorical one with its categories (sorted), from a table read
    by `read_static` or `static_columns`, decided on the series that exist by the training end (`trained`,
    (n_series,) bool): a series that starts after it can be refused (text in a covariate numeric in training) or
    read as an unseen category, never change a role or the categories the model is built with."""
    rows = table[trained]
    numbers = {c: pd.to_numeric(pd.Series(_as_text(rows[c])), errors="coerce") for c in table.columns}
    numeric = tuple(c for c in table.columns if len(rows) and np.isfinite(numbers[c].to_numpy(np.float64)).all())
    categorical = tuple((c, tuple(sorted(set(_as_text(rows[c]))))) for c in table.columns if c not in numeric)
    return numeric, categorical


@dataclass(frozen=True)
class StaticScale:
    """The mean and std of each numeric static covariate over the trained series."""

    mean: np.ndarray  # (n_numeric,) float64
    std: np.ndarray  # (n_numeric,) float64, positive

    @classmethod
    def fit(cls, table: pd.DataFrame, numeric: tuple[str, ...], trained: np.ndarray) -> StaticScale:
        """The scale of the series that exist by the training end (`trained`, (n_series,) bool)."""
        rows = table[trained]
        values = rows[list(numeric)].to_numpy(np.float64).reshape(len(rows), len(numeric))
        std = values.std(axis=0)
        return cls(values.mean(axis=0), np.where(std > 1e-12, std, 1.0))

    def to_dict(self) -> dict[str, list[float]]:
        return {"mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_dict(cls, raw: dict[str, list[float]]) -> StaticScale:
        return cls(np.asarray(raw["mean"], dtype=np.float64), np.asarray(raw["std"], dtype=np.float64))


def encode_static(
    table: pd.DataFrame,
    numeric: tuple[str, ...],
    categorical: tuple[tuple[str, tuple[str, ...]], ...],
    scale: StaticScale,
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The model's static inputs of each row of `table`: standardised numeric values (n, n_numeric) float32 and
    category codes (n, n_categorical) int64 (0 for a category unseen in training, which `unseen_note` names);
    None for a role with no covariate."""
    values = None
    if numeric:
        kinds = [c for c in numeric if table[c].dtype.kind != "f"]
        if kinds:
            column = table[kinds[0]]
            odd = next(v for v in column if _number(str(v)) is None)
            raise DataError(
                f"static covariate {kinds[0]!r} is numeric in the series training reads but holds {str(odd)!r} for "
                "a series that starts after the training end or was not in training; give it a finite number"
            )
        raw = table[list(numeric)].to_numpy(np.float64)
        values = ((raw - scale.mean) / scale.std).astype(np.float32)
    codes = None
    if categorical:
        columns = [_category_codes(_as_text(table[name]), categories) for name, categories in categorical]
        codes = np.stack(columns, axis=1)
    return values, codes


def _category_codes(values: list[str], categories: tuple[str, ...]) -> np.ndarray:
    """Each value's code: 1.. for training's categories, 0 for another. A value is its category by its text, or
    by its number where one category alone has that number: a table whose rows happen to hold only numbers (the
    series predicted alone) reads '007' as 7, which is training's '007'."""
    index = {category: k + 1 for k, category in enumerate(categories)}
    numbers: dict[float, list[int]] = {}
    for category, code in index.items():
        number = _number(category)
        if number is not None:
            numbers.setdefault(number, []).append(code)
    by_number = {number: codes[0] for number, codes in numbers.items() if len(codes) == 1}

    def code(value: str) -> int:
        if value in index:
            return index[value]
        number = _number(value)
        return by_number.get(number, 0) if number is not None else 0

    return np.array([code(value) for value in values], dtype=np.int64)


def _number(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if np.isfinite(number) else None


def unseen_note(table: pd.DataFrame | None, categorical: tuple[tuple[str, tuple[str, ...]], ...], names) -> str:
    """A note naming the first series (of `names`, one per row of `table`) whose static category training never
    saw, which the model reads as an unknown one (code 0), and how many such series; "" when none."""
    if table is None or not categorical:
        return ""
    unseen = np.zeros(len(table), dtype=bool)
    first = None
    for name, categories in categorical:
        values = _as_text(table[name])
        new = _category_codes(values, categories) == 0
        if new.any() and first is None:
            i = int(np.flatnonzero(new)[0])
            shown = ", ".join(categories[:5]) + ", ..." * (len(categories) > 5)
            first = f"{names[i]!r} has {name} {values[i]!r}, not among training's {shown}"
        unseen |= new
    if first is None:
        return ""
    return (
        f"{int(unseen.sum())} series hold a static category training never saw ({first}); the model reads it as "
        "an unknown category"
    )


def _as_text(column: pd.Series) -> list[str]:
    """A categorical column's values as text; one that came out all numbers (its rows happen to hold only
    numeric categories) is written as such numbers are written in text (3, not 3.0)."""
    if column.dtype.kind != "f":
        return column.astype(str).tolist()
    return [str(int(v)) if float(v).is_integer() else str(v) for v in column]
