"""Reading a CSV file into a table: the delimiter sniffed, every cell checked to belong to a named column.

The table's index is the line of the file that holds each row (the header is line 1), so every
later message can name the line.
"""

from __future__ import annotations

import csv
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from tsformer.errors import DataError
from tsformer.files import require_file

DELIMITERS = ",;\t|"
SNIFF_BYTES = 64 * 1024
NEWLINE = re.compile(r"\r\n|\r|\n")  # the line ends pandas splits on
UNNAMED_TIME = "date"  # the time column a DataFrame's unnamed DatetimeIndex becomes


def read_table(path: Path) -> tuple[pd.DataFrame, str, tuple[str, ...]]:
    """The table (index: line of the file), the delimiter it was read with, and a note on a row index it left
    out (`_name_columns`)."""
    text, complete = _read_head(path)
    lines = NEWLINE.split(text)
    if not complete and len(lines) > 1:
        lines = lines[:-1]  # the last line read may be cut short
    n_blank = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    if n_blank == len(lines) and complete:
        raise _empty(path)
    if n_blank == len(lines):
        raise DataError(f"{path} starts with over {SNIFF_BYTES // 1024} KiB of blank lines; remove them")
    delimiter = _sniff_delimiter(lines[n_blank:])
    table = _parse_csv(path, delimiter, n_blank)
    table.index = table.index + n_blank + 2
    table, notes = _name_columns(table.dropna(how="all"), _header_names(lines[n_blank], delimiter), path)
    if table.shape[1] < 2:
        raise DataError(
            f"{path} has only {table.shape[1]} column{'s' * (table.shape[1] == 0)} with delimiter {delimiter!r}; "
            "a CSV needs a time column and at least one numeric column separated by ',', ';', tab or '|'"
        )
    if len(table) == 0:
        raise DataError(f"{path} has a header but no data rows; add rows below the header")
    return table, delimiter, notes


def _read_head(path: Path) -> tuple[str, bool]:
    """The first SNIFF_BYTES of the file as text, and whether that is the whole file."""
    require_file(path)
    try:
        with path.open("rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError as exc:
        raise DataError(f"cannot read {path} ({exc.strerror or exc}); check that it exists and is readable") from None
    complete = len(head) < SNIFF_BYTES
    if complete and not head.strip():
        raise _empty(path)
    if b"\x00" in head:
        raise DataError(f"{path} is not a text CSV (it holds binary data); export the data as CSV")
    try:
        return head.decode("utf-8-sig"), complete
    except UnicodeDecodeError as exc:
        if complete or exc.start < len(head) - 4:  # not merely a character cut at the sniff boundary
            raise _not_utf8(path, exc) from None
        return head[: exc.start].decode("utf-8-sig"), False


def _empty(path: Path) -> DataError:
    return DataError(f"{path} is empty; give a CSV with a header row and data rows")


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> DataError:
    byte = exc.object[exc.start : exc.start + 1].hex()
    return DataError(f"{path} is not UTF-8 text (byte 0x{byte} at offset {exc.start}); save it as a UTF-8 CSV")


def _sniff_delimiter(lines: list[str]) -> str:
    lines = [line for line in lines[:50] if line.strip()]
    try:
        return csv.Sniffer().sniff("\n".join(lines), delimiters=DELIMITERS).delimiter
    except csv.Error:
        counts = {d: lines[0].count(d) for d in DELIMITERS} if lines else {}
        best = max(counts, key=counts.get, default=",")
        return best if counts.get(best) else ","


def _parse_csv(path: Path, delimiter: str, n_blank: int) -> pd.DataFrame:
    """pandas' reading of the file, every row kept (blank lines as empty rows) so rows map to lines."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            table = pd.read_csv(
                path,
                sep=delimiter,
                skiprows=n_blank,
                skipinitialspace=True,
                skip_blank_lines=False,
                index_col=False,
                encoding="utf-8-sig",
                low_memory=False,
            )
    except pd.errors.EmptyDataError:
        raise _empty(path) from None
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from None
    except OSError as exc:
        raise DataError(f"cannot read {path} ({exc.strerror or exc}); check that it exists and is readable") from None
    except (pd.errors.ParserError, ValueError, OverflowError, csv.Error) as exc:
        detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise _long_row_error(path, delimiter) or DataError(
            f"{path} is not a readable CSV with delimiter {delimiter!r} ({detail}); fix the file"
        ) from None
    if any(issubclass(w.category, pd.errors.ParserWarning) for w in caught):
        raise _long_row_error(path, delimiter) or DataError(
            f"{path} has rows longer than its header with delimiter {delimiter!r}; give every row the header's columns"
        )
    return table


def _long_row_error(path: Path, delimiter: str) -> DataError | None:
    """A DataError naming the first row with more fields than the header, if the csv module finds one."""
    try:
        with path.open(newline="", encoding="utf-8-sig", errors="replace") as handle:
            reader = csv.reader(handle, delimiter=delimiter, skipinitialspace=True)
            header = next((row for row in reader if row), [])
            for row in reader:
                if len(row) > len(header):
                    return DataError(
                        f"{path} line {reader.line_num} has {len(row)} fields but the header has {len(header)} "
                        f"(delimiter {delimiter!r}); give every row the header's columns, quoting cells that "
                        f"hold {delimiter!r}"
                    )
    except (csv.Error, OSError):
        return None
    return None


def _header_names(line: str, delimiter: str) -> list[str]:
    """The header's names as the csv module splits them ([] when it cannot)."""
    try:
        return [name.strip() for name in next(csv.reader([line], delimiter=delimiter, skipinitialspace=True), [])]
    except csv.Error:
        return []


def _name_columns(table: pd.DataFrame, header: list[str], path: Path) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """Columns named as in the header (pandas renames duplicates), and a note when the first column was a row
    index: an unnamed empty column is dropped, and so is an unnamed first column counting the rows 0, 1, 2, ...
    (pandas' `to_csv` writes its index so by default)."""
    if len(header) != table.shape[1]:  # the csv module split the header otherwise: trust pandas
        header = [str(c).strip() for c in table.columns]
    notes = ()
    if header and not header[0] and _counts_rows(table.iloc[:, 0]):
        header = ["", *header[1:]]
        table = table.assign(**{str(table.columns[0]): None})  # emptied: dropped below with the unnamed columns
        notes = (f"left out the first column of {path.name}: it has no header name and counts the rows 0, 1, 2, ... "
                 "(a row index, as pandas' to_csv writes one)",)  # fmt: skip
    for i, name in enumerate(header):
        cells = table.iloc[:, i].notna().to_numpy()
        if not name and cells.any():
            raise DataError(
                f"column {i + 1} of {path} has no header name but holds data (from line {table.index[cells][0]}); "
                "name it in the header, or remove it if it is an exported row index"
            )
        if name and name in header[:i]:
            raise DataError(f"{path} has the column name {name!r} twice; give each column a unique name")
    keep = [i for i, name in enumerate(header) if name]
    table = table.iloc[:, keep]
    table.columns = [header[i] for i in keep]
    return table, notes


def _counts_rows(column: pd.Series) -> bool:
    """Whether a column holds 0, 1, 2, ... in order, one per row (a row index)."""
    values = pd.to_numeric(column, errors="coerce")
    return bool(len(values)) and (values.to_numpy() == np.arange(len(values))).all()


def names(columns) -> str:
    """Column names for a one-line message, quoted so odd characters show as escapes: 'date', 'OT'."""
    return ", ".join(repr(str(name)) for name in columns)


def table_from_frame(frame: pd.DataFrame, time_col: str = "") -> pd.DataFrame:
    """A DataFrame as `read_table` gives a file: text column names, and an index numbering the rows as the lines
    of the CSV the frame would write (the header is line 1). A named index, a DatetimeIndex or a MultiIndex
    becomes columns first (so a time index is found like a time column); any other index is dropped. An
    unnamed DatetimeIndex is called `time_col` (the time column asked for, or a trained model's) where no
    column has that name, else `date`."""
    if not isinstance(frame, pd.DataFrame):
        raise DataError(f"expected a pandas DataFrame, got {type(frame).__name__}")
    index = frame.index
    if isinstance(index, pd.DatetimeIndex) and index.name is None:
        name = time_col if time_col and time_col not in frame.columns else UNNAMED_TIME
        if name not in frame.columns:  # found by its name, and the forecast's time column is called so
            frame = frame.rename_axis(name)
    if any(name is not None for name in index.names) or isinstance(index, pd.DatetimeIndex | pd.MultiIndex):
        frame = frame.reset_index()
    table = frame.copy()
    table.columns = [str(c).strip() for c in table.columns]
    duplicated = table.columns[table.columns.duplicated()]
    if len(duplicated):
        raise DataError(f"the DataFrame has the column name {duplicated[0]!r} twice; give each column a unique name")
    if table.shape[1] < 2:
        raise DataError(
            f"the DataFrame has {table.shape[1]} column{'s' * (table.shape[1] != 1)}; it needs a time column and at "
            "least one numeric column"
        )
    if len(table) == 0:
        raise DataError("the DataFrame has no rows; give it rows of data")
    table.index = pd.RangeIndex(2, len(table) + 2)
    return table
