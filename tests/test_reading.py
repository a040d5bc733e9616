"""tsformer.data.reading: how a training file is read is decided from its training rows, never from later ones."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import tiny_config

from tsformer.config import Config, DataConfig, ModelConfig
from tsformer.data import read_series, training_data
from tsformer.data.choices import choice_split
from tsformer.data.reading import read_as_training_rows_say
from tsformer.errors import ConfigError, DataError
from tsformer.train import train

N_ROWS = 300  # hourly rows; the default wide split trains on the first 210


def hourly_text(offsets: list[str]) -> list[str]:
    """N_ROWS hourly instants from 2024-03-25 00:00 UTC+1, each written at its row's offset (+01:00 or +02:00)."""
    start = pd.Timestamp("2024-03-25 00:00", tz="+01:00")
    stamps = [start + pd.Timedelta(hours=i) for i in range(N_ROWS)]
    return [t.tz_convert(offset).isoformat() for t, offset in zip(stamps, offsets, strict=True)]


def reading_config(**data) -> Config:
    return Config(data=DataConfig(**data), model=ModelConfig(horizon=1, context_len=2, patch_len=1))


def checked(frame_source, cfg: Config):
    frame = read_series(frame_source, cfg.data)
    return read_as_training_rows_say(frame, cfg, choice_split(cfg, frame)[1])


def test_a_daylight_saving_switch_written_after_the_training_rows_leaves_the_run_bit_identical(tmp_path):
    t = np.arange(N_ROWS)
    values = (np.sin(2 * np.pi * t / 24) + 0.01 * t).round(4)
    same = hourly_text(["+01:00"] * N_ROWS)
    switched = hourly_text(["+01:00"] * 220 + ["+02:00"] * (N_ROWS - 220))  # the same instants, other notation
    assert same[:220] == switched[:220] and same[220:] != switched[220:]
    states = []
    for name, text in (("same", same), ("switched", switched)):
        csv = tmp_path / f"{name}.csv"
        pd.DataFrame({"date": text, "load": values}).to_csv(csv, index=False)
        cfg = tiny_config(csv)
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, val_horizons=None))
        predictor = train(cfg, show_progress=False)
        assert predictor.config.data.utc_offset == "+01:00"
        states.append(predictor.model.state_dict())
    assert all(torch.equal(states[0][key], states[1][key]) for key in states[0])


def test_the_first_rows_offset_is_the_zone_and_a_stated_one_wins():
    text = hourly_text(["+01:00"] * 100 + ["+02:00"] * (N_ROWS - 100))
    table = pd.DataFrame({"date": text, "v": np.arange(N_ROWS, dtype=float)})
    frame = read_series(table, DataConfig())
    assert str(frame.timestamps.tz) == "UTC+01:00" and frame.timestamps[100].hour == 4  # written 05:00+02:00
    assert any("written at the first row's offset, +01:00" in note for note in frame.notes)
    stated = read_series(table, DataConfig(utc_offset="+00:00"))
    assert str(stated.timestamps.tz) == "UTC" and stated.timestamps[0].hour == 23
    with pytest.raises(ConfigError, match="data.utc_offset must be an offset such as"):
        DataConfig(utc_offset="CET")


def test_daily_local_midnights_across_a_daylight_saving_change_are_daily_data():
    """pandas writes a zoned daily index as local midnights whose offset changes (+02:00, then +01:00): read at
    the first offset those would be 25 hours apart; they are read as the local dates they write."""
    days = pd.date_range("2023-10-01", periods=60, freq="D", tz="Europe/Berlin")  # summer time ends on 10-29
    table = pd.DataFrame({"date": [t.isoformat() for t in days], "v": np.arange(60.0)})
    assert table.date[28] == "2023-10-29T00:00:00+02:00" and table.date[29] == "2023-10-30T00:00:00+01:00"
    frame = read_series(table, DataConfig())
    assert frame.freq == "D" and str(frame.timestamps.tz) == "UTC+02:00"
    assert (frame.timestamps.hour == 0).all() and frame.timestamps[29].day == 30
    assert any("read as each row's local date and time" in note for note in frame.notes)
    hourly = read_series(
        pd.DataFrame({"date": hourly_text(["+01:00"] * 100 + ["+02:00"] * 200), "v": 1.0}), DataConfig()
    )
    assert hourly.freq == "h" and not any("local date" in note for note in hourly.notes)  # instants stay instants


def test_a_first_timestamp_without_an_offset_before_ones_with_it_is_refused(tmp_path):
    # the fuzzer's case: pandas reads the column as zoned, but its first row alone carries no offset
    path = tmp_path / "mixed.csv"
    path.write_bytes(b"date,\x01\n-0\xe2\x80\xa8\n0:0Z")
    with pytest.raises(DataError, match="writes its first timestamp '-0' without a UTC offset and later ones with"):
        read_series(path, DataConfig())


def test_an_integer_past_int64_is_a_value_not_an_epoch(tmp_path):
    # the fuzzer's case: a column of 9223372036854775808 (uint64) overflowed while asking whether it held epochs
    stamps = pd.date_range("2024-01-01", periods=40, freq="h").strftime("%Y-%m-%d %H:%M")
    rows = [f"{9223372036854775808 + i},{t}" for i, t in enumerate(stamps)]
    path = tmp_path / "huge.csv"
    path.write_text("count,when\n" + "\n".join(rows) + "\n")
    frame = read_series(path, DataConfig())
    assert (
        frame.time_col == "when"
        and frame.columns == ("count",)
        and frame.values[0, 0] == pytest.approx(9.223e18, rel=1e-3)
    )


def weekdays(n: int) -> pd.DatetimeIndex:
    return pd.bdate_range("2024-01-01", periods=n)


def test_business_days_in_training_with_a_saturday_later_is_refused_naming_the_flag():
    stamps = weekdays(100).append(pd.DatetimeIndex(["2024-05-25"]))  # a Saturday after the last weekday
    table = pd.DataFrame({"date": stamps.strftime("%Y-%m-%d"), "close": np.linspace(1, 2, 101)})
    assert read_series(table, DataConfig()).freq == "D"  # the whole file: one weekend row makes it daily
    refused = (
        r"the training rows \(to 2024-04-11 00:00:00\) are B steps but later rows make the file D \(the first that "
    )
    refused += r"does not fit B steps: 2024-05-25 00:00:00 at line 102\).*--freq B"
    with pytest.raises(DataError, match=refused):
        checked(table, reading_config())
    with pytest.raises(DataError, match=r"B steps: 2024-05-25 00:00:00 at row 100\)"):  # a DataFrame's, as df.iloc
        training_data(reading_config(), table)
    assert checked(table, reading_config(freq="D")).freq == "D"  # stated: nothing was decided
    assert checked(table.iloc[:100], reading_config()).freq == "B"  # conforming rows


def test_dates_that_only_later_rows_make_day_first_are_refused_and_dayfirst_states_it():
    months = pd.date_range("2000-01-01", periods=17, freq="MS")  # 01/01/2000 ... 01/05/2001, day/month
    table = pd.DataFrame({"date": months.strftime("%d/%m/%Y"), "v": np.arange(17.0)})
    # the first 11 rows (training) read as Jan 1..11 or as the first of 11 months alike; 01/01/2001 decides
    with pytest.raises(DataError, match=r"read as month/day, but later rows make them day/month.*--dayfirst"):
        checked(table, reading_config())
    frame = checked(table, reading_config(dayfirst=True))
    assert frame.freq == "MS" and frame.timestamps[-1] == pd.Timestamp("2001-05-01")


def test_a_panels_date_order_is_checked_on_the_training_rows_of_the_series_it_was_read_from():
    """The order is read from the longest series (B, day/month); its check on training rows took the first
    series' training end (A: six months), where B's dates read either way, and refused an honest file."""
    short = pd.DataFrame({"id": "A", "date": [f"01/{m:02d}/2020" for m in range(3, 9)], "value": np.arange(6.0)})
    months = pd.date_range("2020-01-01", periods=48, freq="MS")
    long = pd.DataFrame({"id": "B", "date": months.strftime("%d/%m/%Y"), "value": np.arange(48.0) % 12})
    frame = checked(pd.concat([short, long]), reading_config(targets=("value",)))
    assert frame.freq == "MS" and (frame.timestamps[frame.rows_of(1)] == months).all()


def test_a_column_constant_in_the_training_rows_is_left_out_of_the_default_targets():
    stamps = pd.date_range("2024-01-01", periods=200, freq="h")
    dividends = np.where(np.arange(200) < 150, 0.0, 0.5)  # one value throughout training (140 rows), later not
    table = pd.DataFrame({"date": stamps.strftime("%Y-%m-%d %H:%M"), "close": np.sin(np.arange(200)), "div": dividends})
    assert read_series(table, DataConfig()).columns == ("close", "div")  # over the whole file it varies
    frame = checked(table, reading_config())
    assert frame.columns == ("close",) and frame.values.shape == (200, 1)
    assert any("'div', which hold one value throughout the training rows" in note for note in frame.notes)
    assert checked(table, reading_config(targets=("close", "div"))).columns == ("close", "div")  # named: kept


def test_a_column_constant_in_training_is_left_out_whatever_later_rows_hold():
    """Two columns at one value throughout training: which of them are targets does not depend on the test rows
    (the reader's own rule over the whole file dropped those constant everywhere, so a later value kept one)."""
    stamps = pd.date_range("2024-01-01", periods=200, freq="h").strftime("%Y-%m-%d %H:%M")
    varies_later = np.where(np.arange(200) < 150, 0.0, np.arange(200) / 7)
    targets = []
    for b in (np.zeros(200), varies_later):  # b constant throughout, or only in training
        table = pd.DataFrame({"date": stamps, "a": varies_later, "b": b})
        targets.append(checked(table, reading_config()).columns)
    assert targets == [("a", "b"), ("a", "b")]  # every column constant in training: all kept, as before either way
    table = pd.DataFrame({"date": stamps, "a": varies_later, "b": np.zeros(200), "c": np.sin(np.arange(200))})
    assert checked(table, reading_config()).columns == ("c",)


def test_a_column_of_numbers_in_training_and_text_later_is_refused():
    stamps = pd.date_range("2024-01-01", periods=200, freq="h").strftime("%Y-%m-%d %H:%M")
    cells = [f"{v:.3f}" for v in np.sin(np.arange(200))]
    marked = cells[:80] + ["none"] * 120  # mostly numbers in training (80 of 140 rows), mostly a marker overall
    table = pd.DataFrame({"date": stamps, "a": np.cos(np.arange(200)), "c": marked})
    assert read_series(table, DataConfig()).columns == ("a",)  # over the whole file it reads as text
    with pytest.raises(
        DataError, match=r"column 'c' holds mostly numbers in the training rows.*'none' at line 82.*--target"
    ):  # row 140: line 142
        checked(table, reading_config())
    assert checked(table, reading_config(targets=("a",))).columns == ("a",)  # named: the question does not arise
    words = pd.DataFrame({"date": stamps, "a": np.cos(np.arange(200)), "c": ["on", "off"] * 100})
    assert checked(words, reading_config()).columns == ("a",)  # text in training too: not a target, no error


def test_an_id_column_found_by_values_needs_two_series_with_training_rows():
    stamps = pd.date_range("2024-01-01", periods=200, freq="h").strftime("%Y-%m-%d %H:%M")
    one = pd.DataFrame({"date": stamps, "site": "A", "y": np.sin(np.arange(200))})
    assert checked(one, reading_config()).id_cols == ()  # a constant text column: one series, as read
    late = pd.concat([one, pd.DataFrame({"date": [stamps[-1]], "site": ["B"], "y": [0.5]})], ignore_index=True)
    with pytest.raises(DataError, match=r"'site' was taken as the series id.*only 1 of its 2 values has training"):
        checked(late, reading_config())
    assert checked(late, reading_config(id_cols=("site",))).n_ids == 2  # stated: read as two series
    two = pd.concat([one, one.assign(site="B")], ignore_index=True)  # repeated from the first row on
    assert checked(two, reading_config()).id_cols == ("site",)
    launched = one.iloc[150:].assign(site="B")  # a store opened late: no timestamp shared within training rows
    assert checked(pd.concat([one, launched], ignore_index=True), reading_config()).n_ids == 2


def test_a_decimal_mark_is_decided_by_the_training_rows_of_a_panel(tmp_path):
    """Store A's first decimal comma lies in its last rows (after its training rows) but comes first in the file;
    store B's training rows write 1.234-style values, which that comma would read as thousands."""
    weeks = pd.date_range("2020-01-06", periods=60, freq="W-MON").strftime("%Y-%m-%d")
    a = [("A", w, f"{100 + i}" + (",5" if i == 59 else "")) for i, w in enumerate(weeks)]  # its test row
    b = [("B", w, f"1.{100 + i:03d}") for i, w in enumerate(weeks)]
    path = tmp_path / "stores.csv"
    pd.DataFrame(a + b, columns=["store", "week", "units"]).to_csv(path, sep=";", index=False)
    with pytest.raises(DataError, match=r"column 'units' reads '1.100' \(line 62, a training row\) with the decimal"):
        checked(path, reading_config())
    plain = tmp_path / "plain.csv"  # no comma anywhere: B's points are decimals, as its training rows say
    pd.DataFrame(a[:59] + b, columns=["store", "week", "units"]).to_csv(plain, sep=";", index=False)
    assert checked(plain, reading_config()).values[-1, 0] == pytest.approx(1.159)
