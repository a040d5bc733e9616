"""How a training file is read is decided from its training rows: later rows conform, or are refused.

The reader (`tsformer.data.loader`) decides some things over the whole file: the frequency, the order of
ambiguous day/month dates, which columns read as numbers, and whether a text column names series. A decision that
rows after the training end could change would let the future move the training rows (their grid, their
dates, the columns trained on). So once the split is known, each decision is made again from the training
rows alone (each series' rows up to its training end, as read, `ReadEvidence`):

- frequency and day/month order: when the training rows decide otherwise than the whole file, the later
  rows do not conform to how the training rows read; a DataError names the rows and the flag that states it
  (--freq, --dayfirst), so the user decides, not the later rows;
- default targets: a column that holds one value throughout the training rows is left out, with a note (its
  later values cannot be learnt from the training rows); a column read as text (not a target) that holds
  numbers in the training rows is refused, so later text cells cannot take a target away;
- a decimal mark (comma or point, `loader.decimal_comma`: the file's first cell with a mark decides): where the
  training rows hold a marked cell, it must decide the same (a panel's first marked cell in the file may be
  another series' last row); a DataError names the training cell;
- an id column found by its values (no column named like one, `loader._id_col_by_values`: the first text column)
  rests on repeated timestamps: it must name two series or more with training rows of their own, or a few later
  rows would make a panel of one series; a DataError says to name it (--id-col) or remove the repeats.

The UTC offset of timestamps is decided from the first row (`timestamps.parse_timestamps`), and the
calendar features from each row's own timestamp, so neither needs a second look.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pandas as pd

from tsformer.config import Config
from tsformer.data.csvfile import names
from tsformer.data.loader import MARKED, NUMBER_START, SeriesFrame, decimal_comma, is_numeric_like
from tsformer.data.split import SplitBorders
from tsformer.data.timestamps import pick_date_order, resolve_freq
from tsformer.errors import DataError

ORDER_WORDS = {"month-first": "month/day", "day-first": "day/month"}


def read_as_training_rows_say(frame: SeriesFrame, cfg: Config, borders: SplitBorders) -> SeriesFrame:
    """`frame`, its reading decisions checked against those its training rows make (see the module)."""
    evidence = frame.reading
    if evidence is None:  # not read for training (a DataFrame of timestamps, or a trained model's frequency)
        return frame
    train_last = frame.timestamps[frame.bounds[:-1] + np.maximum(borders.train_end, 1) - 1]  # (n_ids,)
    if not cfg.data.freq:
        _check_freq(frame, train_last[evidence.freq_series])
    if evidence.date_readings:
        _check_date_order(frame, cfg, train_last[evidence.freq_series])  # the series its readings are of
    if evidence.id_by_values:
        _check_ids_by_values(frame, evidence.id_by_values, borders)
    if evidence.text_columns or evidence.mark_columns:
        training = np.asarray(evidence.row_stamps <= train_last[evidence.row_series])  # (n_rows,) file order
        _check_text_columns(evidence.text_columns, training)
        _check_decimal_marks(evidence.mark_columns, training)
    if not cfg.data.targets and not frame.id_cols:
        frame = _without_constant_training_columns(frame, int(borders.train_end[0]))
    return frame


def _check_ids_by_values(frame: SeriesFrame, column: str, borders: SplitBorders) -> None:
    """An id column found by its values rests on timestamps the file repeats: it must name at least two series
    with training rows of their own (a series of a few late rows, whose every row lies after the training rows,
    would make a panel of a file the training rows read as one series)."""
    trained = np.flatnonzero(borders.train_end > 0)
    if len(trained) >= 2:
        return
    others = [name for i, name in enumerate(frame.names) if i not in trained]
    raise DataError(
        f"{column!r} was taken as the series id because the time column repeats timestamps, but only "
        f"{len(trained)} of its {frame.n_ids} values has training rows (the others, {', '.join(others[:3])}, only "
        "rows after them): how a file is read is decided from its training rows, so state it: if "
        f"{column!r} names series, pass --id-col {column}; if not (a status or a note), the rows that repeat a "
        "timestamp are duplicates to remove"
    )


def _check_decimal_marks(columns: dict[str, pd.Series], training: np.ndarray) -> None:
    """A column's decimal mark (comma or point: the first cell with a mark decides, in file order) must be the one
    its training rows' first marked cell gives, where they have one (a panel's later rows may come first in the
    file: another series' last rows). `training`: (n_rows,) bool, the training rows in file order."""
    for name, cells in columns.items():
        own = cells[training].dropna().astype(str).str.strip()
        marked = own[own.str.fullmatch(MARKED)]
        if not len(marked):
            continue  # whole numbers in training: either mark reads them alike
        if decimal_comma(cells, ";") != decimal_comma(cells[training], ";"):
            raise DataError(
                f"column {name!r} reads {marked.iloc[0]!r} (line {marked.index[0]}, a training row) with the decimal "
                "mark of a cell after the training rows, written with the other mark: how a file is read is decided "
                "from its training rows; write every number of the column with one decimal mark"
            )


def _check_text_columns(columns: dict[str, pd.Series], training: np.ndarray) -> None:
    """A column read as text (so not a default target) must read as text in the training rows too. `training`:
    (n_rows,) bool, the training rows in file order."""
    for name, cells in columns.items():
        if not is_numeric_like(cells[training]):
            continue
        text = cells.dropna().astype(str)
        words = text[~text.str.match(NUMBER_START)]
        example = (
            f" (the first cell that is no number: {words.iloc[0]!r} at line {words.index[0]})" if len(words) else ""
        )
        raise DataError(
            f"column {name!r} holds mostly numbers in the training rows but mostly text over the whole file{example}, "
            "so later rows would decide whether it is forecast: how a file is read is decided from its training "
            "rows; if it is text, name the columns to forecast with --target; if it is numbers, write its missing "
            "values as empty cells or NA"
        )


def _check_freq(frame: SeriesFrame, train_last: pd.Timestamp) -> None:
    evidence = frame.reading
    stamps, lines = evidence.freq_stamps, evidence.freq_lines
    training = np.asarray(stamps <= train_last)
    try:
        freq, _ = resolve_freq(stamps[training], "", "", lines[training])
    except DataError:  # too few or irregular training rows: training refuses them with its own message
        return
    if freq != frame.freq:
        k = _first_misfit(stamps, lines, int(training.sum()), freq)
        raise DataError(
            f"the training rows (to {train_last}) are {freq} steps but later rows make the file {frame.freq} (the "
            f"first that does not fit {freq} steps: {stamps[k]} at line {lines[k]}): how a file is read is decided "
            f"from its training rows, so state it with --freq {freq} (the later rows must then fit it) or --freq "
            f"{frame.freq}"
        )


def _first_misfit(stamps: pd.DatetimeIndex, lines: np.ndarray, n_training: int, freq: str) -> int:
    """A row after the training rows at which the prefix stops reading as `freq` steps, by binary search: the
    first such row where, as usually, a longer prefix does not mend a broken frequency (a prefix that fails just
    after a long gap can fit again later: then a later breaking row)."""

    def fits(end: int) -> bool:
        try:
            return resolve_freq(stamps[:end], "", "", lines[:end])[0] == freq
        except DataError:
            return False

    low, high = n_training, len(stamps) - 1  # the prefix through `low - 1` fits; through `high` it does not
    while low < high:
        middle = (low + high) // 2
        if fits(middle + 1):
            low = middle + 1
        else:
            high = middle
    return low


def _check_date_order(frame: SeriesFrame, cfg: Config, train_last: pd.Timestamp) -> None:
    evidence = frame.reading
    chosen = evidence.date_readings[evidence.date_order]
    training = np.asarray(chosen <= train_last)
    readings = {order: stamps[training] for order, stamps in evidence.date_readings.items()}
    try:
        order = pick_date_order(readings, frame.time_col, cfg.data)
    except DataError:  # neither order reads the training rows regularly: the whole file's reading stands
        return
    if order != evidence.date_order:
        raise DataError(
            f"the dates in {frame.time_col!r} up to the training end ({train_last.date()}) read as "
            f"{ORDER_WORDS[order]}, but later rows make them {ORDER_WORDS[evidence.date_order]}: how a file is "
            "read is decided from its training rows, so state it: pass --dayfirst to read them as day/month, or "
            "fix the later dates"
        )


def _without_constant_training_columns(frame: SeriesFrame, train_end: int) -> SeriesFrame:
    """A wide file's default targets without the columns that hold one value throughout the training rows."""
    training = np.where(frame.observed[:train_end], frame.values[:train_end], np.nan)
    with warnings.catch_warnings():  # a column with no value in training: refused later with its own message
        warnings.simplefilter("ignore", RuntimeWarning)
        constant = np.nanmin(training, axis=0) == np.nanmax(training, axis=0)  # (n_columns,)
    if not constant.any() or constant.all():
        return frame
    dropped = [name for name, flat in zip(frame.columns, constant, strict=True) if flat]
    note = (
        f"left out of the targets the column{'s' * (len(dropped) > 1)} {names(dropped)}, which hold one value "
        "throughout the training rows (what they do later cannot be learnt; name them with --target to forecast "
        "them)"
    )
    keep = ~constant
    return dataclasses.replace(
        frame,
        values=np.ascontiguousarray(frame.values[:, keep]),
        observed=np.ascontiguousarray(frame.observed[:, keep]),
        columns=tuple(name for name, kept in zip(frame.columns, keep, strict=True) if kept),
        notes=frame.notes + (note,),
    )
