import json
import re

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import make_frame, tiny_config, write_csv

from tsformer.config import DataConfig
from tsformer.data import (
    Scaler,
    SeriesFrame,
    SeriesInputs,
    read_series,
    split_borders,
    training_data,
    window_target_starts,
)
from tsformer.errors import DataError


def test_reads_time_column_frequency_and_numeric_targets(tmp_path):
    frame = make_frame(50, 2)
    frame["station"] = "north"  # a text column is not a target
    frame = frame[["station", "date", "a", "b"]]
    series = read_series(write_csv(tmp_path / "x.csv", frame), DataConfig())
    assert series.time_col == "date"
    assert series.freq == "h"
    assert series.columns == ("a", "b")
    assert series.values.dtype == np.float32 and series.values.shape == (50, 2)
    np.testing.assert_allclose(series.values[:, 1], frame["b"].to_numpy(), rtol=1e-6)


def test_weekly_frequency_is_inferred(tmp_path):
    series = read_series(write_csv(tmp_path / "w.csv", make_frame(20, 1, freq="W-TUE")), DataConfig())
    assert series.freq == "W-TUE"


def test_semicolon_delimiter_is_sniffed(tmp_path):
    path = tmp_path / "semi.csv"
    make_frame(30, 2).to_csv(path, sep=";", index=False)
    assert read_series(path, DataConfig()).columns == ("a", "b")


def one_series(stamps: pd.DatetimeIndex) -> SeriesFrame:
    values = np.zeros((len(stamps), 1), dtype=np.float32)
    return SeriesFrame(stamps, values, ("a",), "date", "h", np.ones_like(values, dtype=bool))


def test_ratio_borders_and_too_few_rows():
    stamps = pd.date_range("2024", periods=100, freq="h")
    borders = split_borders(DataConfig(), one_series(stamps), context_len=20, horizon=5)
    assert borders.to_list() == [[70], [80], [100]]
    with pytest.raises(
        DataError, match=r"the train split has 70 rows but needs at least 80 \(context_len \+ horizon = 80\)"
    ):
        split_borders(DataConfig(), one_series(stamps), context_len=75, horizon=5)


def test_explicit_row_and_date_borders():
    frame = one_series(pd.date_range("2024-01-01", periods=100, freq="h"))
    rows = split_borders(DataConfig(split_borders=(60, 80, 95)), frame, 10, 5)
    dates = split_borders(DataConfig(split_borders=("2024-01-03 12:00", "2024-01-04 08:00", 95)), frame, 10, 5)
    assert rows.to_list() == [[60], [80], [95]]
    assert dates.to_list() == [[60], [80], [95]]


def test_negative_row_borders_count_back_from_the_end():
    frame = one_series(pd.date_range("2024-01-01", periods=100, freq="h"))
    assert split_borders(DataConfig(split_borders=(-40, -20, -5)), frame, 10, 5).to_list() == [[60], [80], [95]]
    assert split_borders(DataConfig(split_borders=(60, -20, 100)), frame, 10, 5).to_list() == [[60], [80], [100]]
    with pytest.raises(DataError, match=r"give rows \[-20, 80, 95\], which must increase and stay within its 100 rows"):
        split_borders(DataConfig(split_borders=(-120, -20, -5)), frame, 10, 5)


def test_scaler_uses_training_rows_only(tiny_csv):
    data = training_data(tiny_config(tiny_csv))
    train_end = int(data.borders.train_end[0])
    train = data.frame.values[:train_end]
    np.testing.assert_allclose(data.scaler.mean[0], train.mean(0), rtol=1e-5)
    np.testing.assert_allclose(data.scaler.std[0], train.std(0), rtol=1e-5)
    assert not np.allclose(data.scaler.mean[0], data.frame.values.mean(0), rtol=1e-3)
    np.testing.assert_allclose(data.inputs.target[:train_end].mean(0).numpy(), 0, atol=1e-5)


def test_windows_are_stride_one_views_with_the_right_rows():
    values = torch.arange(40, dtype=torch.float32).reshape(20, 2)  # row r holds (2r, 2r + 1)
    phase = torch.arange(20, dtype=torch.float32)  # a role of one value per row
    inputs = SeriesInputs(values, None, np.array([0, 20]), phase=phase)
    starts = np.arange(5, 14)
    windows = inputs.unfold(starts, torch.zeros(len(starts), dtype=torch.long), context_len=5, horizon=3)
    assert windows.target.shape == (9, 8, 2) and windows.phase.shape == (9, 8)
    for window, block in ((windows.target, values), (windows.phase, phase)):  # views, not copies
        assert window.untyped_storage().data_ptr() == block.untyped_storage().data_ptr()
    for i, start in enumerate(starts):
        torch.testing.assert_close(windows.target[i], values[start - 5 : start + 3])
        torch.testing.assert_close(windows.phase[i], phase[start - 5 : start + 3])
    gathered = inputs.gather(torch.from_numpy(starts), torch.zeros(len(starts), dtype=torch.long), 5, 3)
    assert torch.equal(gathered.target, windows.target) and torch.equal(gathered.phase, windows.phase)


def test_window_targets_stay_in_their_split(tiny_csv):
    data = training_data(tiny_config(tiny_csv))
    train_end, val_end, test_end = (int(e[0]) for e in data.borders.to_list())
    bounds = data.frame.bounds
    counts = {s: len(window_target_starts(s, data.borders, bounds, 16, 4)[0]) for s in ("train", "val", "test")}
    assert counts == {
        "train": train_end - 16 - 4 + 1,
        "val": val_end - train_end - 4 + 1,
        "test": test_end - val_end - 4 + 1,
    }
    test_starts, floors = window_target_starts("test", data.borders, bounds, 16, 4)
    assert test_starts[0] == val_end and test_starts[-1] + 4 == test_end and (floors == 0).all()


def test_scaler_round_trip():
    scaler = Scaler.fit(np.array([[1.0, 10.0], [3.0, 10.0]], dtype=np.float32))
    assert scaler.std.tolist() == [[1.0, 1.0]]  # a constant column keeps std 1
    x = np.array([[2.0, 11.0]], dtype=np.float32)
    np.testing.assert_allclose(scaler.inverse(scaler.transform(x)), x)
    assert Scaler.from_dict(scaler.to_dict()).mean.tolist() == scaler.mean.tolist()


def test_the_floor_is_zero_where_a_column_reached_zero_in_training_and_never_went_below():
    train = np.array([[0.0, -1.0, 3.0, np.nan], [4.0, 2.0, 5.0, np.nan]], dtype=np.float32)  # (rows, columns)
    scaler = Scaler.fit(train)
    assert scaler.lowest[0, :3].tolist() == [0.0, -1.0, 3.0] and np.isnan(scaler.lowest[0, 3])
    floors = scaler.floors()[0]  # scaled: (0 - mean) / std for the count-like column, no floor elsewhere
    assert floors[0] == pytest.approx(-1.0) and np.isneginf(floors[1:]).all()  # mean 2, std 2
    back = Scaler.from_dict(json.loads(json.dumps(scaler.to_dict())))  # NaN stored as null
    np.testing.assert_array_equal(back.lowest, scaler.lowest)
    assert np.isneginf(Scaler(scaler.mean, scaler.std).floors()).all()  # a run saved before it: no floor
    assert scaler.floors("zero")[0].tolist() == pytest.approx((-scaler.mean / scaler.std)[0].tolist())  # every column
    assert np.isneginf(scaler.floors("none")).all()


def test_a_panels_column_is_floored_for_every_series_or_none():
    # three series of one quantity: counts that reached zero, counts of fives that never did, and a column that
    # went below zero in one series (a temperature): floored per column, not per series
    counts = [np.array([[0.0, 1.0], [2.0, -3.0]]), np.array([[5.0, 0.0], [6.0, 2.0]]), np.array([[4.0, 0.0]])]
    scaler = Scaler.stack([Scaler.fit(rows.astype(np.float32)) for rows in counts])
    assert scaler.bounded_columns().tolist() == [True, False]
    per_series = np.isfinite(scaler.floors())  # a series alone: only where it reached zero itself
    assert per_series.tolist() == [[True, False], [False, True], [False, True]]
    pooled = scaler.floors("auto", scaler.bounded_columns())
    assert np.isfinite(pooled[:, 0]).all() and np.isneginf(pooled[:, 1]).all()
    assert pooled[1, 0] == pytest.approx(-5.5 / 0.5)  # the series of fives: zero is 11 of its stds below its mean
    assert Scaler(scaler.mean, scaler.std).bounded_columns() is None


def test_constant_columns_are_left_out_of_a_wide_files_default_targets(tmp_path):
    frame = make_frame(60, 2)
    frame["Dividends"], frame["Stock Splits"] = 0.0, 0  # a stock's columns that never change
    from tsformer.data import training_data

    series = training_data(tiny_config(), write_csv(tmp_path / "stock.csv", frame)).frame
    assert series.columns == ("a", "b")  # decided on the training rows (tests/test_reading.py: later rows move none)
    assert (
        "left out of the targets the columns 'Dividends', 'Stock Splits', which hold one value throughout the "
        "training rows (what they do later cannot be learnt; name them with --target to forecast them)"
    ) in series.notes
    named = read_series(tmp_path / "stock.csv", DataConfig(targets=("a", "Dividends")))
    assert named.columns == ("a", "Dividends")  # named, it is forecast


def test_missing_cells_of_several_columns_are_one_note(tmp_path):
    frame = make_frame(60, 2)
    frame.loc[[3, 4], "a"] = np.nan
    frame.loc[[7], "b"] = np.nan
    series = read_series(write_csv(tmp_path / "holes.csv", frame), DataConfig())
    notes = [note for note in series.notes if "missing" in note]
    assert notes == [
        "3 missing or infinite cells (2 of 'a', 1 of 'b') are unobserved: masked in the inputs, the loss and the "
        "metrics (or pass --fill ffill or zero)"
    ]


def test_integer_epoch_timestamps_are_read_in_the_unit_their_magnitude_says(tmp_path):
    base = 1167609600  # 2007-01-01 00:00 UTC, in seconds
    for unit, factor in (("s", 1), ("ms", 10**3), ("us", 10**6), ("ns", 10**9)):
        frame = pd.DataFrame({"timestamp": (base + 3600 * np.arange(50)) * factor, "y": np.arange(50.0)})
        series = read_series(write_csv(tmp_path / f"{unit}.csv", frame), DataConfig())
        assert series.timestamps[0] == pd.Timestamp("2007-01-01") and series.freq == "h", unit
        assert series.time_notation.kind == "epoch" and series.time_notation.format == unit
        word = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}[unit]
        assert f"read the integer time column 'timestamp' as Unix epoch {word} (by their magnitude" in series.notes[0]
    stated = read_series(tmp_path / "ms.csv", DataConfig(time_unit="ms"))
    assert stated.time_notation.format == "ms" and not any("epoch" in note for note in stated.notes)
    years = read_series(
        write_csv(tmp_path / "years.csv", pd.DataFrame({"year": range(1990, 2040), "y": 1.0 * np.arange(50)})),
        DataConfig(time_col="year"),
    )
    assert years.timestamps[0] == pd.Timestamp("1990-01-01")  # a year stays a year


def test_a_column_named_year_is_the_time_column_even_written_as_floats(tmp_path):
    """A float column's export writes 1935.0; it is the year 1935, found by the column's name, and written back
    as a year."""
    frame = pd.DataFrame({"invest": 1.0 + np.arange(30), "year": np.arange(1935.0, 1965.0)})
    series = read_series(write_csv(tmp_path / "grunfeld.csv", frame), DataConfig())
    assert series.time_col == "year" and series.columns == ("invest",) and series.freq.startswith("YS")
    assert series.timestamps[[0, -1]].tolist() == [pd.Timestamp("1935-01-01"), pd.Timestamp("1964-01-01")]
    assert series.time_notation.write(series.timestamps[:2]).tolist() == ["1935", "1936"]


@pytest.mark.parametrize("fmt", ["%-m/%-d/%Y", "%-d/%-m/%Y", "%-m/%-d/%Y %-H:%M", "%Y-%m-%d %-H:%M"])
def test_dates_without_leading_zeros_are_written_back_without_them(tmp_path, fmt):
    days = pd.date_range("2024-03-28", periods=40, freq="D")
    frame = pd.DataFrame({"date": days.strftime(fmt), "y": np.arange(40.0)})
    series = read_series(write_csv(tmp_path / "d.csv", frame), DataConfig(dayfirst=fmt.startswith("%-d")))
    assert series.freq == "D" and series.timestamps[0] == days[0]
    later = pd.DatetimeIndex(["2024-05-07", "2024-12-10"])
    assert series.time_notation.write(later).tolist() == later.strftime(fmt).tolist()  # 5/7/2024, not 05/07/2024


def test_iso_utc_times_written_with_z_are_written_back_with_z(tmp_path):
    hours = pd.date_range("2024-01-01", periods=50, freq="h", tz="UTC")
    frame = pd.DataFrame({"ts": hours.strftime("%Y-%m-%dT%H:%M:%SZ"), "y": np.arange(50.0)})
    series = read_series(write_csv(tmp_path / "z.csv", frame), DataConfig())
    assert series.freq == "h" and str(series.timestamps.tz) == "UTC"
    assert series.time_notation.write(series.timestamps[-1:] + pd.Timedelta("1h")).tolist() == ["2024-01-03T02:00:00Z"]


def test_iso_times_across_a_change_of_offset_keep_their_notation(tmp_path):
    """A local file across the switch to summer time writes +01:00, then +02:00: the times are read at the first
    offset, and the rows written at the other still say which notation the file uses (its T, its %:z)."""
    hours = pd.date_range("2024-03-29", periods=72, freq="h", tz="Europe/Berlin")
    frame = pd.DataFrame({"ts": [hour.isoformat() for hour in hours], "y": np.arange(72.0)})
    assert frame["ts"].str.endswith("+02:00").any() and frame["ts"].iloc[0].endswith("+01:00")
    series = read_series(write_csv(tmp_path / "local.csv", frame), DataConfig())
    assert series.time_notation.format == "%Y-%m-%dT%H:%M:%S%:z"
    assert series.time_notation.write(series.timestamps[:1]).tolist() == ["2024-03-29T00:00:00+01:00"]


@pytest.mark.parametrize("part, n, freq, first", [("quarter", 4, "QS", "1959Q1"), ("Month", 12, "MS", "1959-01")])
def test_a_year_column_beside_a_quarter_or_month_column_is_one_time_column(tmp_path, part, n, freq, first):
    """statsmodels' macrodata writes year, quarter, realgdp, ... (as floats): both make the time, and the part
    column is no target."""
    steps = np.arange(40)
    frame = pd.DataFrame({"year": 1959.0 + steps // n, part: 1.0 + steps % n, "realgdp": 100.0 + steps})
    series = read_series(write_csv(tmp_path / "macro.csv", frame), DataConfig())
    assert series.time_col == "year" and series.columns == ("realgdp",) and series.freq.startswith(freq)
    assert series.timestamps[1] - series.timestamps[0] == pd.Timedelta(days=90 if n == 4 else 31)
    assert series.notes[0].startswith(f"read the time from 'year' and '{part}' ({first}, ")
    assert series.time_notation.write(series.timestamps[:1]).tolist() == [first]
    frame.loc[5, part] = 13.0  # not a part of a year: the year alone is the time, and it repeats
    with pytest.raises(DataError, match="duplicate timestamp"):
        read_series(write_csv(tmp_path / "odd.csv", frame), DataConfig())


@pytest.mark.parametrize("written", ["%b %Y", "%B %Y", "%d-%b-%Y"])
def test_dates_with_month_names_make_the_time_column_and_are_written_back_alike(tmp_path, written):
    stamps = pd.date_range("2000-01-01", periods=48, freq="MS")
    frame = pd.DataFrame({"month": stamps.strftime(written), "sales": np.arange(48.0)})
    series = read_series(write_csv(tmp_path / "months.csv", frame), DataConfig())
    assert series.time_col == "month" and series.freq == "MS" and series.timestamps[13] == stamps[13]
    assert series.time_notation.write(series.timestamps[:2]).tolist() == frame["month"][:2].tolist()


@pytest.mark.parametrize(("written", "dayfirst"), [("%d/%m/%y", False), ("%d.%m.%y", True), ("%m/%d/%y", False)])
def test_dates_with_two_digit_years_are_read_in_the_order_that_fits_and_written_back_alike(tmp_path, written, dayfirst):
    """pandas guesses no format for 01/02/20, so it was read month-first whatever the order (day/month files then
    failed as decreasing timestamps, and --sort scrambled them); the order that gives regular dates is chosen."""
    stamps = pd.date_range("2020-01-01", periods=60, freq="D")
    frame = pd.DataFrame({"date": stamps.strftime(written), "sales": np.arange(60.0)})
    series = read_series(write_csv(tmp_path / "daily.csv", frame), DataConfig(dayfirst=dayfirst))
    assert series.freq == "D" and (series.timestamps == stamps).all()
    assert series.time_notation.write(series.timestamps[-2:]).tolist() == frame["date"][-2:].tolist()


def test_a_panels_date_order_is_read_from_its_longest_series(tmp_path):
    """A panel whose first series has one row (10/04/2024, either order) was read month-first from that row, and
    its other series' 13/01/2024 then failed to parse without a word of --dayfirst."""
    stamps = pd.date_range("2024-01-01", periods=60, freq="D")
    first = pd.DataFrame({"unique_id": ["a"], "ds": ["10/02/2024"], "y": [1.0]})
    rest = pd.DataFrame({"unique_id": "b", "ds": stamps.strftime("%d/%m/%Y"), "y": np.arange(60.0)})
    series = read_series(write_csv(tmp_path / "panel.csv", pd.concat([first, rest])), DataConfig())
    assert (series.timestamps[series.bounds[1] :] == stamps).all()
    assert series.timestamps[0] == pd.Timestamp("2024-02-10")
    assert any("as day/month" in note for note in series.notes)


def test_iso_week_labels_are_their_mondays_and_are_written_back_alike(tmp_path):
    mondays = pd.date_range("2015-12-21", periods=60, freq="W-MON")  # across 2015-W53 and the turn of two years
    labels = [f"{d.isocalendar().year}-W{d.isocalendar().week:02d}" for d in mondays]
    series = read_series(write_csv(tmp_path / "weeks.csv", pd.DataFrame({"week": labels, "cases": np.arange(60.0)})),
                         DataConfig())  # fmt: skip
    assert series.time_col == "week" and series.freq == "W-MON" and (series.timestamps == mondays).all()
    assert labels[1] == "2015-W53" and series.time_notation.write(series.timestamps[:3]).tolist() == labels[:3]


def test_weekday_only_data_with_holidays_are_business_days(tmp_path):
    days = pd.bdate_range("2023-01-02", periods=300).delete([20, 100, 150])  # three holidays
    frame = pd.DataFrame({"Date": days.strftime("%Y-%m-%d"), "Close": 100 + np.arange(len(days)) * 0.1})
    series = read_series(write_csv(tmp_path / "stock.csv", frame), DataConfig())
    assert series.freq == "B" and series.n_rows == 300 and series.observed.sum() == 297
    assert series.notes[0].startswith("read as business days (B, season 5): the rows are a day apart but never on")
    calendar = pd.date_range("2023-01-01", periods=300, freq="D")  # every day: daily, not business days
    daily = read_series(
        write_csv(tmp_path / "daily.csv", pd.DataFrame({"date": calendar, "y": 1.0 * np.arange(300)})), DataConfig()
    )
    assert daily.freq == "D"


def test_business_days_with_one_saturday_are_daily_with_a_note_naming_it(tmp_path):
    days = pd.bdate_range("2023-01-02", periods=300).append(pd.DatetimeIndex(["2023-03-04"])).sort_values()
    frame = pd.DataFrame({"Date": days.strftime("%Y-%m-%d"), "Close": 100 + np.arange(301) * 0.1})
    series = read_series(write_csv(tmp_path / "stock.csv", frame), DataConfig())
    assert series.freq == "D" and series.observed.sum() == 301
    assert series.notes[0].startswith("read as daily (D): the rows fall on weekdays but for 1 on a weekend (first "
                                      "2023-03-04 00:00:00 at line 47)")  # fmt: skip
    assert "2023-03-04 00:00:00 at row 45)" in read_series(frame, DataConfig()).notes[0]  # a DataFrame's, as iloc
    weekly = pd.date_range("2023-01-01", periods=300, freq="D")[::2]  # every other day, weekends too: no note
    other = read_series(write_csv(tmp_path / "d.csv", pd.DataFrame({"d": weekly, "y": 1.0 * np.arange(150)})),
                        DataConfig())  # fmt: skip
    assert not any(note.startswith("read as daily") for note in other.notes)


@pytest.mark.parametrize("label", ["{y}Q{q}", "{y} Q{q}", "{y}-Q{q}"])
def test_quarter_labels_are_quarters(tmp_path, label):
    labels = [label.format(y=1998 + i // 4, q=i % 4 + 1) for i in range(40)]
    series = read_series(write_csv(tmp_path / "q.csv", pd.DataFrame({"quarter": labels, "gdp": np.arange(40.0)})),
                         DataConfig())  # fmt: skip
    assert series.timestamps[1] == pd.Timestamp("1998-04-01") and series.freq.startswith("QS")
    assert series.time_notation.write(series.timestamps[:2]).tolist() == labels[:2]


def test_a_day_column_is_the_time_column_and_names_are_preferred_in_order(tmp_path):
    """`day` names a daily file's time column (no note); of two columns with time names, the first whose values
    read as increasing timestamps: the Date after a Year of repeated years, the Timestamp before a Date of
    repeated days."""
    days = pd.date_range("2024-01-01", periods=40, freq="D")
    daily = pd.DataFrame({"day": days.strftime("%Y-%m-%d"), "sales": np.arange(40.0)})
    series = read_series(write_csv(tmp_path / "daily.csv", daily), DataConfig())
    assert series.time_col == "day" and series.freq == "D" and series.columns == ("sales",) and not series.notes
    both = pd.DataFrame({"Year": days.year, "Date": days.strftime("%Y-%m-%d"), "sales": np.arange(40.0)})
    series = read_series(write_csv(tmp_path / "both.csv", both), DataConfig())
    assert series.time_col == "Date" and series.freq == "D" and "sales" in series.columns
    hours = pd.date_range("2024-01-01", periods=72, freq="h")
    hourly = pd.DataFrame({"timestamp": hours.strftime("%Y-%m-%d %H:%M"), "date": hours.strftime("%Y-%m-%d"),
                           "load": np.arange(72.0)})  # fmt: skip
    series = read_series(write_csv(tmp_path / "hourly.csv", hourly), DataConfig(targets=("load",)))
    assert series.time_col == "timestamp" and series.freq == "h"


def test_a_column_that_reads_as_regular_timestamps_is_the_time_column_when_none_is_named_like_one(tmp_path):
    frame = pd.DataFrame({"month": pd.date_range("2004-01-01", periods=60, freq="MS").strftime("%Y-%m"),
                          "searches": np.arange(60.0)})  # fmt: skip
    series = read_series(write_csv(tmp_path / "trends.csv", frame), DataConfig())
    assert series.time_col == "month" and series.freq == "MS" and series.columns == ("searches",)
    assert series.notes[0].startswith("took 'month' as the time column: no column is named like one")
    assert series.time_notation.write(series.timestamps[:1]).tolist() == ["2004-01"]


@pytest.mark.parametrize("marker", ["-", "?", "missing"])
def test_a_missing_marker_pandas_does_not_know_is_named_as_one(tmp_path, marker):
    frame = make_frame(60, 1)
    frame["a"] = frame["a"].round(3).astype(str)
    frame.loc[7, "a"] = marker
    with pytest.raises(
        DataError, match=rf"'{re.escape(marker)}' at line 9 .*; a missing value is an empty cell or NA,"
    ):
        read_series(write_csv(tmp_path / "marked.csv", frame), DataConfig())


def test_a_wide_files_text_column_left_out_of_the_targets_is_named():
    frame = make_frame(60, 2).assign(status=["ok"] * 50 + ["maintenance"] * 10)
    series = read_series(frame, DataConfig())
    assert series.columns == ("a", "b") and "left out of the targets the text column 'status'" in series.notes
