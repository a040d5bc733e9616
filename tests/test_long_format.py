"""Long format: many series in one file (id, time, value), each on its own clock, one global model."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import TINY_FLAGS, tiny_config
from test_cli_errors import assert_error, invoke

from tsformer.backtest import score_origins
from tsformer.config import DataConfig
from tsformer.data import read_series, training_data
from tsformer.errors import DataError
from tsformer.evaluate import format_report
from tsformer.leakage import check_data, check_scaler, check_windows
from tsformer.predictor import load_predictor
from tsformer.runs import backtest_run, evaluate_run, predict_run
from tsformer.train import train

HORIZON = 4  # TINY_FLAGS and tiny_config


def long_frame(lengths: dict[str, int], start: str = "2024-01-01", seed: int = 0, level: float = 10.0) -> pd.DataFrame:
    """unique_id, ds, y: one hourly sine per series, each with its own length, level and scale."""
    rng = np.random.default_rng(seed)
    parts = []
    for k, (uid, n) in enumerate(lengths.items()):
        t = np.arange(n)
        scale = 10.0**k  # 1, 10, 100, ...: scales a global model must not mix up
        y = scale * (level + np.sin(2 * np.pi * t / 24 + k) + 0.1 * rng.normal(size=n))
        stamps = pd.date_range(start, periods=n, freq="h") + pd.Timedelta(hours=3 * k)  # each its own start
        parts.append(pd.DataFrame({"unique_id": uid, "ds": stamps.strftime("%Y-%m-%d %H:%M:%S"), "y": y.round(4)}))
    return pd.concat(parts, ignore_index=True)


@pytest.fixture
def long_csv(tmp_path):
    path = tmp_path / "long.csv"
    long_frame({"A": 120, "B": 96, "C": 150}).to_csv(path, index=False)
    return path


@pytest.fixture
def long_run(long_csv, tmp_path):
    train(tiny_config(long_csv), tmp_path / "run", show_progress=False)
    return tmp_path / "run"


def test_a_panel_of_local_days_across_daylight_saving_keeps_its_grid():
    # Berlin's midnights: the day of the switch to summer time is 23 hours long, which a fixed 24-hour step
    # put off the grid ("series 'b' is not on the D grid")
    days = pd.date_range("2021-03-20", periods=20, freq="D", tz="Europe/Berlin")
    table = pd.concat(
        [
            pd.DataFrame({"unique_id": uid, "ds": days[k:], "y": np.arange(20 - k, dtype=float)})
            for k, uid in enumerate("ab")
        ]
    )
    frame = read_series(table, DataConfig())
    assert frame.bounds.tolist() == [0, 20, 39] and frame.observed.all()
    assert (frame.timestamps == frame.timestamps.normalize()).all()  # every row a local midnight, none inserted


def test_the_id_column_is_found_and_each_series_keeps_its_rows(long_csv):
    frame = read_series(long_csv, DataConfig())
    assert frame.id_cols == ("unique_id",) and frame.keys == (("A",), ("B",), ("C",))
    assert frame.bounds.tolist() == [0, 120, 216, 366] and frame.columns == ("y",)
    raw = pd.read_csv(long_csv)
    for i, uid in enumerate("ABC"):
        rows = frame.rows_of(i)
        np.testing.assert_allclose(frame.values[rows, 0], raw[raw.unique_id == uid]["y"], rtol=1e-6)
        assert frame.timestamps[rows][0] == pd.Timestamp("2024-01-01") + pd.Timedelta(hours=3 * i)


def test_rows_may_come_interleaved_by_time(tmp_path, long_csv):
    shuffled = pd.read_csv(long_csv).sort_values(["ds", "unique_id"], kind="stable")
    shuffled.to_csv(tmp_path / "by_time.csv", index=False)
    a, b = read_series(long_csv, DataConfig()), read_series(tmp_path / "by_time.csv", DataConfig())
    assert a.keys == b.keys and np.array_equal(a.values, b.values) and a.timestamps.equals(b.timestamps)


def test_compound_ids_name_a_series_by_several_columns(tmp_path):
    frame = long_frame({"x": 60, "y": 60, "z": 60}).rename(columns={"unique_id": "product", "y": "sales"})
    frame["region"] = np.repeat(["north", "north", "south"], 60)
    frame["product"] = np.repeat(["apple", "pear", "apple"], 60)
    frame.to_csv(tmp_path / "compound.csv", index=False)
    series = read_series(tmp_path / "compound.csv", DataConfig(id_cols=("region", "product")))
    assert series.keys == (("north", "apple"), ("north", "pear"), ("south", "apple"))
    assert series.names == ("north/apple", "north/pear", "south/apple") and series.columns == ("sales",)


def test_long_files_forecast_y_and_say_what_else_they_ignore(tmp_path):
    frame = long_frame({"A": 60, "B": 60})
    frame["price"] = 1.0
    frame.to_csv(tmp_path / "extra.csv", index=False)
    series = read_series(tmp_path / "extra.csv", DataConfig())
    assert series.columns == ("y",) and any("'price' are not used" in note for note in series.notes)


def test_missing_timestamps_in_one_series_become_unobserved_steps(tmp_path):
    frame = long_frame({"A": 100, "B": 100})
    frame = frame.drop(index=[110, 111, 112])  # three hours of B
    frame.to_csv(tmp_path / "gappy.csv", index=False)
    series = read_series(tmp_path / "gappy.csv", DataConfig())
    assert series.bounds.tolist() == [0, 100, 200]  # B back on its full grid
    assert (~series.observed[100:200, 0]).sum() == 3 and not series.observed[110:113, 0].any()
    assert any("3 timestamps missing" in note and "'B'" in note for note in series.notes)


def test_each_series_is_split_by_its_last_horizons_and_scaled_on_its_own_training_rows(long_csv):
    data = training_data(tiny_config(long_csv))
    lengths = np.array([120, 96, 150])
    assert data.borders.to_list() == [(lengths - 8).tolist(), (lengths - 4).tolist(), lengths.tolist()]
    frame = data.frame
    for i in range(3):
        train_rows = frame.values[frame.rows_of(i)][: lengths[i] - 8]
        np.testing.assert_allclose(data.scaler.mean[i], train_rows.mean(0), rtol=1e-5)
        np.testing.assert_allclose(data.scaler.std[i], train_rows.std(0), rtol=1e-5)
    assert 50 < data.scaler.mean[2, 0] / data.scaler.mean[0, 0] < 200  # scales 1 and 100: kept apart
    assert all(r.passed for r in check_data(data, data.config))
    # one validation and one test window per series, each forecasting that series' own last steps
    for split, end_offset in (("val", 4), ("test", 0)):
        starts, floors = data.target_starts(split)
        assert (starts + HORIZON == frame.bounds[1:] - end_offset).all() and (floors == frame.bounds[:-1]).all()


def test_a_scaler_fit_across_series_fails_the_check(long_csv):
    data = training_data(tiny_config(long_csv))
    leaky = dataclasses.replace(data.scaler, mean=data.scaler.mean[[0, 0, 0]])  # A's statistics for every series
    assert check_scaler(data.frame, data.borders, data.scaler).passed
    assert not check_scaler(data.frame, data.borders, leaky).passed


def test_windows_that_run_into_the_next_series_fail_the_split_check(long_csv, monkeypatch):
    data = training_data(tiny_config(long_csv))
    module = importlib.import_module("tsformer.data.prepare")
    real = module.window_target_starts

    def spilling(split, borders, bounds, min_history, horizon):
        starts, floors = real(split, borders, bounds, min_history, horizon)
        last = floors == bounds[-2]  # the last series has no next one to run into
        return starts + np.where((split == "test") & ~last, 2, 0), floors  # 2 steps past A's and B's ends

    monkeypatch.setattr(module, "window_target_starts", spilling)
    results = {r.name: r for r in check_windows(data)}
    assert not results["data/splits"].passed
    assert "outside their split or series" in results["data/splits"].detail


def test_short_series_are_skipped_from_training_by_name_and_still_forecast(tmp_path):
    csv = tmp_path / "ragged.csv"
    long_frame({"long": 160, "tiny": 10, "other": 140}).to_csv(csv, index=False)
    data = training_data(tiny_config(csv))
    note = next(n for n in data.notes if "skipped from training" in n)
    assert "1 series too short for a training window" in note and "(still forecast): 'tiny'" in note
    train_series = np.searchsorted(data.frame.bounds, data.target_starts("train")[1], side="right") - 1
    assert set(train_series.tolist()) == {0, 2}
    train(tiny_config(csv), tmp_path / "run", show_progress=False)
    forecast = predict_run(tmp_path / "run", csv).frame
    assert forecast.groupby("unique_id", sort=False).size().to_dict() == {"long": 4, "tiny": 4, "other": 4}
    assert np.isfinite(forecast["y"]).all()


def test_left_padded_training_windows_are_masked(tmp_path):
    csv = tmp_path / "short.csv"
    long_frame({"a": 40, "b": 40}).to_csv(csv, index=False)  # 32 training rows each, context 16
    data = training_data(tiny_config(csv))
    index = data.split_windows("train")
    batch = index.take(torch.arange(len(index)))
    padded = (index.starts - 16 < index.floors).numpy()
    assert padded.any(), "some training windows start less than a context into their series"
    assert batch.observed is not None
    for i in np.flatnonzero(padded)[:3]:
        n_pad = int(index.floors[i] - (index.starts[i] - 16))
        assert not batch.observed[i, :n_pad].any() and (batch.target[i, :n_pad] == 0).all()
        assert batch.observed[i, n_pad:].all()


def test_predict_writes_long_format_that_joins_back_onto_the_data(long_run, long_csv, tmp_path):
    full = pd.read_csv(long_csv)
    history = full.groupby("unique_id", sort=False).head(-HORIZON)  # each series without its last 4 rows
    history.to_csv(tmp_path / "history.csv", index=False)
    forecast = predict_run(long_run, tmp_path / "history.csv").frame
    assert list(forecast.columns[:3]) == ["unique_id", "ds", "y"] and len(forecast) == 3 * HORIZON
    forecast["ds"] = forecast["ds"].dt.strftime("%Y-%m-%d %H:%M:%S")
    joined = full.merge(forecast, on=["unique_id", "ds"], suffixes=("", "_forecast"))
    assert len(joined) == 3 * HORIZON  # every forecast row lands on a real (series, time) of the data
    assert (joined.groupby("unique_id").size() == HORIZON).all()
    # each series' forecast is in its own units: within its own range, three orders of magnitude apart
    for uid, part in joined.groupby("unique_id"):
        values = full[full.unique_id == uid]["y"]
        assert values.min() - values.std() < part["y_forecast"].mean() < values.max() + values.std()


def test_predict_starts_each_series_after_its_last_value_not_after_blank_rows(long_run, long_csv, tmp_path):
    full = pd.read_csv(long_csv)
    expected = predict_run(long_run, long_csv).frame
    ahead = full.groupby("unique_id", sort=False).tail(1).assign(y=np.nan)  # as in the Nixtla habit of covariates ahead
    ahead = pd.concat([ahead.assign(ds=pd.to_datetime(ahead["ds"]) + pd.Timedelta(hours=h)) for h in (1, 2)])
    with_blanks = pd.concat([full, ahead[ahead["unique_id"] != "B"]])
    with_blanks.to_csv(tmp_path / "blanks.csv", index=False)
    forecast = predict_run(long_run, tmp_path / "blanks.csv")
    pd.testing.assert_frame_equal(forecast.frame, expected)
    assert "the last rows of 2 series hold no target value (2 of 'A')" in " ".join(forecast.notes)


def test_predict_says_which_series_end_before_the_others(long_run, long_csv, tmp_path):
    full = pd.read_csv(long_csv)
    ends = full.groupby("unique_id")["ds"].max()  # C ends at the data's last time, A and B before it
    assert list(ends[ends < ends.max()].index) == ["A", "B"] and ends["B"] < ends["A"]
    note = f"2 series end before the data's last time ({ends.max()}), the earliest 'B' at {ends['B']}"
    assert f"{note}: each is forecast after its own last row" in predict_run(long_run, long_csv).notes
    together = full[pd.to_datetime(full["ds"]) <= pd.to_datetime(ends["B"])]  # every series cut at B's end
    together.to_csv(tmp_path / "together.csv", index=False)
    assert not any("end before" in note for note in predict_run(long_run, tmp_path / "together.csv").notes)


def test_predict_equals_the_scored_test_window_of_each_series(long_run, long_csv, tmp_path, monkeypatch):
    """Cut each series at its test origin: predict gives what evaluate scored, in the CSV's units."""
    import tsformer.evaluate as evaluate_module
    import tsformer.runs as runs_module

    scored = []
    real_score = evaluate_module.score
    monkeypatch.setattr(evaluate_module, "score", lambda f, *a, **k: scored.append(f) or real_score(f, *a, **k))
    runs_module.evaluate_run(long_run, write=False)
    ckpt = load_predictor(long_run / "model.pt")
    full = pd.read_csv(long_csv)
    full.groupby("unique_id", sort=False).head(-HORIZON).to_csv(tmp_path / "cut.csv", index=False)
    forecast = predict_run(long_run, tmp_path / "cut.csv").frame
    for i in range(3):
        expected = ckpt.scaler.inverse(scored[0][i], i)[:, 0]  # (H,), the model row's forecast of series i
        np.testing.assert_allclose(forecast["y"].to_numpy()[i * HORIZON : (i + 1) * HORIZON], expected, rtol=1e-5)


def test_a_series_not_seen_in_training_is_forecast_from_its_own_history(long_run, tmp_path):
    long_frame({"A": 120, "new": 80}, level=50.0).to_csv(tmp_path / "with_new.csv", index=False)
    result = predict_run(long_run, tmp_path / "with_new.csv")
    assert any("1 series not in training;" in note for note in result.notes)
    new = result.frame[result.frame.unique_id == "new"]["y"]
    assert len(new) == HORIZON and 450 < new.mean() < 550  # its own level (50 x scale 10), not A's (10)


def test_a_series_too_short_for_a_backtest_origin_is_left_out_by_name(tmp_path):
    """`tiny` (4 rows, horizon 4) has no origin after its validation (one with no row before it): the others are
    backtested, and a note names it, where it blocked the whole panel; a --start inside a backtested series'
    validation is refused."""
    csv = tmp_path / "ragged.csv"
    long_frame({"long": 160, "tiny": 4, "other": 140}).to_csv(csv, index=False)  # tiny: one horizon, no history
    train(tiny_config(csv), tmp_path / "run", show_progress=False)
    result = backtest_run(tmp_path / "run")
    assert result.notes[0] == (
        "1 of 3 series left out: too short for an origin after their validation and 4 steps after it ('tiny')"
    )
    assert result.forecasts.groupby("unique_id", sort=False).size().to_dict() == {"long": 4, "other": 4}
    with pytest.raises(DataError, match=r"2 origins 4 steps apart reach inside .* 1 fit after them in series"):
        backtest_run(tmp_path / "run", windows=2)
    full = load_predictor(tmp_path / "run")
    rows = full.read().borders.val_end[[0, 2], None]  # each kept series' first test origin
    alone = score_origins(full, full.read(), rows, np.array([0, 2])).forecasts
    pd.testing.assert_frame_equal(result.forecasts, alone)  # the kept series, as scored on their own rows
    early = str(pd.read_csv(csv).query("unique_id == 'long'").ds.iloc[100])  # inside long's validation
    with pytest.raises(DataError, match=r"--start .* falls inside the data the model was trained .* 'long'") as caught:
        backtest_run(tmp_path / "run", start=early)
    # long's test stretch starts at hour 156, other's ends at 145 (it starts 6 hours later, 20 rows shorter)
    assert "; no one --start fits every series (their test stretches do not overlap)" in str(caught.value)


def test_a_series_too_short_to_train_is_scaled_for_mase_by_its_rows_before_the_test(tmp_path):
    """`short` (9 rows, horizon 4) has one training row, so no seasonal-naive error to scale MASE by there: its
    training and validation rows (before every scored window) give the scale, not 1 in the data's units."""
    csv = tmp_path / "ragged.csv"
    frame = long_frame({"long": 160, "short": 9, "other": 140})
    frame.to_csv(csv, index=False)
    train(tiny_config(csv), tmp_path / "run", show_progress=False)
    evaluate_run(tmp_path / "run")
    table = pd.read_csv(tmp_path / "run" / "metrics_by_series.csv").set_index("unique_id")
    before_test = frame[frame.unique_id == "short"]["y"].to_numpy()[:5]  # 1 training + 4 validation rows
    scale = np.abs(np.diff(before_test)).mean()  # lag 1: five rows are shorter than a day's season
    assert table.loc["short", "mase"] == pytest.approx(table.loc["short", "mae_original"] / scale, rel=1e-4)


def test_predict_reads_a_history_in_any_row_order(long_run, long_csv, tmp_path):
    """The run knows each series' clock, so a shuffled history (appended rows, a concatenation) is the same one:
    the same forecast, where training without --sort refuses rows out of order."""
    shuffled = pd.read_csv(long_csv).sample(frac=1.0, random_state=0)
    shuffled.to_csv(tmp_path / "shuffled.csv", index=False)
    by_series = lambda frame: frame.sort_values(["unique_id", "ds"], ignore_index=True)  # noqa: E731
    pd.testing.assert_frame_equal(
        by_series(predict_run(long_run, tmp_path / "shuffled.csv").frame),
        by_series(predict_run(long_run, long_csv).frame),
    )  # series in the order they first appear, each in time order


def test_evaluate_and_backtest_read_the_runs_series_in_any_row_order(long_run, long_csv, tmp_path):
    """A long file sorted another way lists its series in another order of first appearance (here C, A, B):
    the same series, so the same scores, each under its own name."""
    shuffled = pd.read_csv(long_csv).sample(frac=1.0, random_state=1)
    assert shuffled["unique_id"].drop_duplicates().tolist() != ["A", "B", "C"]
    shuffled.to_csv(tmp_path / "shuffled.csv", index=False)
    predictor = load_predictor(long_run)
    assert predictor.read(tmp_path / "shuffled.csv").frame.keys == predictor.series == (("A",), ("B",), ("C",))
    as_trained, reordered = evaluate_run(long_run), evaluate_run(long_run, tmp_path / "shuffled.csv")
    assert reordered.scores == as_trained.scores and reordered.worst_series == as_trained.worst_series
    again, before = backtest_run(long_run, tmp_path / "shuffled.csv", windows=1), backtest_run(long_run, windows=1)
    pd.testing.assert_frame_equal(again.forecasts, before.forecasts)


def test_evaluate_scores_every_series_and_writes_them(long_run):
    report = evaluate_run(long_run)
    assert report.n_series == 3 and report.n_windows == 3
    table = pd.read_csv(long_run / "metrics_by_series.csv")
    assert table["unique_id"].tolist() == ["A", "B", "C"]
    assert {"smape", "mase", "seasonal_naive_mase", "repeat_last_mase"} <= set(table.columns)
    # the aggregate is the mean over series (one window of equal length each)
    assert report.scores["model"]["mean"]["mase"] == pytest.approx(table["mase"].mean(), rel=1e-6)
    assert report.scores["model"]["mean"]["smape"] == pytest.approx(table["smape"].mean(), rel=1e-6)
    assert [row["series"] for row in report.worst_series] == table.sort_values("mase", ascending=False)[
        "unique_id"
    ].tolist()
    assert (long_run / "test_windows.png").stat().st_size > 0


def test_the_cli_trains_evaluates_and_predicts_long_format(long_csv, tmp_path):
    run = tmp_path / "cli_run"
    result = invoke("train", long_csv, "--out", run, "--id-col", "unique_id", *TINY_FLAGS)
    assert result.exit_code == 0, result.output
    assert "3 series, split one by one" in result.stderr
    result = invoke("evaluate", run)
    assert (
        result.exit_code == 0
        and "test windows: 3 (every window, stride 1) in 3 series" in result.stdout
        and "ten worst series" in result.stdout
    )
    out = tmp_path / "forecast.csv"
    result = invoke("predict", run, long_csv, "--out", out, "--plot", tmp_path / "fan.png")
    assert result.exit_code == 0, result.output
    written = pd.read_csv(out)
    assert list(written.columns[:3]) == ["unique_id", "ds", "y"] and len(written) == 12
    assert (tmp_path / "fan.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("edit", "flags", "fragments"),
    [
        (
            lambda f: pd.concat([f.iloc[:6], f.iloc[[5]], f.iloc[6:]]),
            (),
            ("series 'A'", "duplicate timestamp", "lines 7 and 8", "one row per series"),
        ),
        (
            lambda f: f[~((f.unique_id == "B") & (np.arange(len(f)) % 3 != 0))],  # B every 3 hours
            (),
            ("series 'B' is too sparse for the h grid", "20 rows over 58 steps", "leave this one out"),
        ),
        (
            lambda f: f.assign(ds=f.ds.where(f.index != 61, "2024-01-01 04:30:00")),  # B row 2: 30 min late
            (),
            ("series 'B' is not on the h grid", "2024-01-01 04:30:00 at line 63"),
        ),
        (lambda f: f.assign(unique_id=[f"s{i}" for i in range(len(f))]), (), ("different value on each", "--id-col")),
        (lambda f: f.assign(unique_id=f.unique_id.where(f.index != 7)), (), ("empty id", "line 9")),
        (lambda f: f, ("--id-col", "store"), ("id column 'store' not in",)),
        (lambda f: f, ("--target", "unique_id"), ("is an id column",)),
    ],
    ids=["duplicate-pair", "other-frequency", "off-grid", "unique-per-row", "empty-id", "missing-id", "id-target"],
)
def test_bad_long_input_is_one_error_line(tmp_path, edit, flags, fragments):
    csv = tmp_path / "bad.csv"
    edit(long_frame({"A": 60, "B": 60})).to_csv(csv, index=False)
    run = tmp_path / "run"
    assert_error(invoke("train", csv, "--out", run, *TINY_FLAGS, *flags), *fragments, left_behind=(run,))


def test_a_long_file_of_one_series_named_by_id_col_is_read_as_one_series(tmp_path):
    csv = tmp_path / "air.csv"
    long_frame({"AirPassengers": 200}).to_csv(csv, index=False)  # unique_id the same on every row
    run = tmp_path / "run"
    result = invoke("train", csv, "--out", run, "--id-col", "unique_id", "--quiet", *TINY_FLAGS)
    assert result.exit_code == 0, result.output
    assert "id column 'unique_id' holds one value ('AirPassengers') on every row: read as one series" in result.stderr
    assert load_predictor(run / "model.pt").borders.to_list() == [[140], [160], [200]]  # 70/10/20, one series
    forecast = predict_run(run, csv).frame
    assert list(forecast.columns[:3]) == ["unique_id", "ds", "y"] and (forecast["unique_id"] == "AirPassengers").all()


def panel_by_name(names: list[str], years: int = 20) -> pd.DataFrame:
    """country, code, year, rate: one row per country and year, with no column named like an id."""
    rows = [(name, name[:3].upper(), 1960 + t, 5.0 - 0.1 * t + k) for k, name in enumerate(names) for t in range(years)]
    return pd.DataFrame(rows, columns=["country", "code", "year", "rate"])


def test_the_first_text_column_is_the_id_when_timestamps_repeat(tmp_path):
    csv = tmp_path / "rates.csv"
    panel_by_name(["Aruba", "Chad", "Peru"]).to_csv(csv, index=False)
    frame = read_series(csv, DataConfig())
    assert frame.id_cols == ("country",) and frame.keys == (("Aruba",), ("Chad",), ("Peru",))
    assert frame.columns == ("rate",) and frame.bounds.tolist() == [0, 20, 40, 60]
    assert "took 'country' as the series id column" in frame.notes[0] and "each of its 3 series" in frame.notes[0]
    np.testing.assert_allclose(frame.values[frame.rows_of(1), 0], 6.0 - 0.1 * np.arange(20))


def test_a_row_written_twice_in_a_panel_found_by_values_is_refused_at_its_own_lines(tmp_path):
    """One (country, year) written twice late in the file was refused as "duplicate timestamp 1960 at lines 2 and
    22": the first country's first year and the second's, a repeat every panel has."""
    panel = panel_by_name(["Aruba", "Chad", "Peru"], years=40)
    csv = tmp_path / "rates.csv"
    pd.concat([panel, panel.iloc[[75]]]).to_csv(csv, index=False)  # Chad's 1995 again, at the end
    with pytest.raises(DataError, match=r"duplicate timestamp 1995 for country 'Chad' at lines 77 and 122; keep one"):
        read_series(csv, DataConfig())
    two_ids = pd.concat([panel.assign(item=k) for k in range(3)])[["country", "item", "year", "rate"]]
    two_ids.to_csv(csv, index=False)  # every (country, year) three times: a second id column, not a stray row
    repeat = r"duplicate timestamp 1960-01-01 00:00:00 at lines 2 and 42;.*--id-col store --id-col item"
    with pytest.raises(DataError, match=repeat):
        read_series(csv, DataConfig())
    sensors = panel.assign(sensor=panel["country"].map({"Aruba": 0, "Chad": 1, "Peru": 2}))
    sensors["country"] = sensors["country"].replace("Chad", "Aruba")  # two sensors at one site, every year
    sensors[["year", "sensor", "country", "rate"]].to_csv(csv, index=False)  # the numeric id tells them apart
    with pytest.raises(DataError, match=r"duplicate timestamp 1960-01-01 00:00:00 at lines 2 and 42;.*--id-col"):
        read_series(csv, DataConfig())


def test_ids_with_digits_are_text_and_numbers_written_with_marks_are_numbers(tmp_path):
    """store, date, units: ids like S0 or SKU12 hold digits yet are a text column (the id), while a column of
    numbers written with thousands separators or a percent sign stays numeric, so reading names what is wrong."""
    rows = [(f"SKU{k}2", f"2024-01-{t + 1:02d}", 10.0 * k + t) for k in range(3) for t in range(20)]
    csv = tmp_path / "sales.csv"
    pd.DataFrame(rows, columns=["store", "date", "units"]).to_csv(csv, index=False)
    frame = read_series(csv, DataConfig())
    assert frame.id_cols == ("store",) and frame.keys == (("SKU02",), ("SKU12",), ("SKU22",))
    assert frame.columns == ("units",) and frame.bounds.tolist() == [0, 20, 40, 60]
    marked = pd.DataFrame({"date": pd.date_range("2024-01-01", periods=20).astype(str), "sold": ["1,234"] * 20})
    marked.to_csv(tmp_path / "marked.csv", index=False)
    with pytest.raises(DataError, match="sold"):
        read_series(tmp_path / "marked.csv", DataConfig())


def test_a_first_text_column_that_does_not_tell_rows_apart_is_no_id(tmp_path):
    """Only the first text column is tried (so later rows can refuse the file, never pick another column); where
    it repeats a (value, timestamp) pair the file is refused, with the flag that names the id."""
    table = panel_by_name(["Aruba", "Chad"])
    table["country"] = "Earth"  # every row the same: no id
    csv = tmp_path / "earth.csv"
    table.to_csv(csv, index=False)
    with pytest.raises(DataError, match="duplicate timestamp .* or name the column that tells several series apart"):
        read_series(csv, DataConfig())
    assert read_series(csv, DataConfig(id_cols=("code",))).keys == (("ARU",), ("CHA",))


def test_a_text_column_beside_unrepeated_timestamps_is_no_id(tmp_path):
    table = panel_by_name(["Aruba"])  # one series: its timestamps never repeat
    csv = tmp_path / "one.csv"
    table.to_csv(csv, index=False)
    frame = read_series(csv, DataConfig())
    assert frame.id_cols == () and frame.columns == ("rate",)


def test_evaluate_refuses_a_csv_without_the_runs_series(long_run, long_csv, tmp_path):
    pd.read_csv(long_csv).query("unique_id != 'B'").to_csv(tmp_path / "two.csv", index=False)
    assert_error(invoke("evaluate", long_run, "--csv", tmp_path / "two.csv"), "lacks 1 of the run's 3 series", "'B'")


def test_date_borders_split_series_that_end_on_different_dates(tmp_path):
    """One border date for all series: each series is split where the dates fall in it; one that ends before
    a border simply has no rows after it."""
    csv = tmp_path / "ends.csv"
    long_frame({"A": 200, "B": 150}).to_csv(csv, index=False)  # B starts 3 h later and ends 47 h earlier
    cfg = tiny_config(csv)
    borders = ("2024-01-05 00:00:00", "2024-01-07 00:00:00", "2024-01-09 08:00:00")
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, split_borders=borders))
    data = training_data(cfg)
    assert data.borders.to_list() == [[96, 93], [144, 141], [200, 150]]
    assert all(r.passed for r in check_data(data, data.config))


def test_negative_row_borders_count_back_from_each_series_end(tmp_path):
    """A panel's negative border is that many rows before each series' own end; before a short series' first row,
    it is its first row (the series has no training rows)."""
    csv = tmp_path / "ends.csv"
    long_frame({"A": 200, "B": 150, "C": 30}).to_csv(csv, index=False)
    cfg = tiny_config(csv)
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, split_borders=(-40, -10, -2)))
    data = training_data(cfg)
    assert data.borders.to_list() == [[160, 110, 0], [190, 140, 20], [198, 148, 28]]


def test_evaluate_names_the_series_it_has_no_test_window_for(tmp_path):
    csv = tmp_path / "ragged.csv"
    long_frame({"long": 160, "tiny": 4, "other": 140}).to_csv(csv, index=False)  # tiny: one horizon, no history
    train(tiny_config(csv), tmp_path / "run", show_progress=False)
    report = evaluate_run(tmp_path / "run")
    assert report.n_series == 2
    assert report.unscored_note == (
        "1 of 3 series have no test window and are not scored ('tiny'): too short for one, or ended before the split"
    )
    assert report.unscored_note in format_report(report).splitlines()[:3]
