import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import make_frame, tiny_config, write_csv
from test_cli_errors import assert_error, invoke

from tsformer.errors import DataError
from tsformer.predictor import load_predictor
from tsformer.runs import predict_run
from tsformer.train import train


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("predict")
    csv = write_csv(root / "data.csv", make_frame())
    train(tiny_config(csv), root / "run", show_progress=False)
    return root / "run"


def test_forecast_continues_the_timestamps(run, tmp_path):
    forecast = predict_run(run, write_csv(tmp_path / "h.csv", make_frame(100))).frame
    bands = [f"{side}_{level}" for level in ("80", "95") for side in ("lower", "upper")]
    assert list(forecast.columns) == [
        "date", "a", *(f"a_{b}" for b in bands), "a_forecaster", "b", *(f"b_{b}" for b in bands), "b_forecaster"
    ]  # fmt: skip
    assert (forecast["a_lower_95"] <= forecast["a_lower_80"]).all() and (forecast["a_lower_80"] <= forecast["a"]).all()
    assert (forecast["a"] <= forecast["a_upper_80"]).all() and (forecast["a_upper_80"] <= forecast["a_upper_95"]).all()
    assert forecast["date"].iloc[0] == pd.Timestamp("2024-01-05 04:00") and len(forecast) == 4
    assert (forecast["date"].diff().dropna() == pd.Timedelta("1h")).all()


def test_blank_rows_at_the_end_are_left_out_and_the_forecast_starts_after_the_last_value(run, tmp_path):
    history = make_frame(100)
    expected = predict_run(run, write_csv(tmp_path / "h.csv", history)).frame
    blank = pd.DataFrame({"date": pd.date_range(history["date"].iloc[-1], periods=13, freq="h")[1:]})
    for n in (12, 1):  # a day of rows with a time and no value, then one such row
        forecast = predict_run(run, write_csv(tmp_path / f"blank{n}.csv", pd.concat([history, blank.head(n)])))
        pd.testing.assert_frame_equal(forecast.frame, expected)
        assert f"the last {n} rows hold no target value" in " ".join(forecast.notes)
        missing = next(note for note in forecast.notes if note.startswith(f"{2 * n} missing or infinite cells"))
        assert f"the {2 * n} blank cells of those rows are among the missing ones" in " ".join(forecast.notes)
        assert missing  # the reader's count, which includes them
    one_column = history.assign(b=np.where(np.arange(100) >= 98, np.nan, history["b"]))  # a gap in one column
    kept = predict_run(run, write_csv(tmp_path / "gap.csv", one_column))
    assert kept.frame["date"].iloc[0] == expected["date"].iloc[0] and "no target value" not in " ".join(kept.notes)


def test_history_shorter_than_the_context_is_padded(run, tmp_path):
    forecast = predict_run(run, write_csv(tmp_path / "short.csv", make_frame(5)))
    values = forecast.frame.select_dtypes("number").to_numpy()
    assert values.shape == (4, 10) and np.isfinite(values).all()  # 2 columns, each with 2 intervals
    assert any(note.startswith("the data hold 5 rows, fewer than the model's context of 16") for note in forecast.notes)
    full = predict_run(run, write_csv(tmp_path / "long.csv", make_frame(50)))
    assert not any("fewer than the model's context" in note for note in full.notes)


def test_columns_must_match_the_checkpoint(run, tmp_path):
    frame = make_frame(50).rename(columns={"b": "c"})
    with pytest.raises(DataError, match="does not match the model"):
        predict_run(run, write_csv(tmp_path / "other.csv", frame))


def test_frequency_must_match_the_checkpoint(run, tmp_path):
    with pytest.raises(DataError, match="frequency"):
        predict_run(run, write_csv(tmp_path / "daily.csv", make_frame(50, freq="D")))


def test_forecast_is_the_models_scaled_output_back_in_the_csvs_units(tmp_path):
    """A series far from 0 and 1 (mean ~1000, std ~50): the forecast is scaler.inverse(model output), to 1e-6."""
    import torch

    frame = make_frame()
    frame["a"] = 1000 + 70 * frame["a"]
    frame["b"] = 1000 + 70 * (frame["b"] - 10)
    csv = write_csv(tmp_path / "big.csv", frame)
    # the model's own forecast, from the targets alone; float32: the test scales the context its own way, a float32
    # digit from predict's, which bfloat16's rounding can turn into 1e-5 of the forecast
    cfg = tiny_config(csv, fallback=False, precision="float32")
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, calendar=False))
    train(cfg, tmp_path / "run", show_progress=False)
    ckpt = load_predictor(tmp_path / "run" / "model.pt")
    values = pd.read_csv(csv)[["a", "b"]].to_numpy()
    np.testing.assert_allclose(ckpt.scaler.mean[0], values[:168].mean(0), rtol=1e-6)  # ~1000
    assert ((40 < ckpt.scaler.std) & (ckpt.scaler.std < 60)).all()

    forecast = predict_run(tmp_path / "run", csv).frame
    context = torch.from_numpy(ckpt.scaler.transform(values[-16:])).float().unsqueeze(0)  # (1, L, C), scaled
    scaled = ckpt.model.predict(context)[0].numpy()  # (H, C)
    assert np.abs(scaled).max() < 5  # the model works on standardised values
    point = forecast[["a", "b"]].to_numpy()
    np.testing.assert_allclose(point, ckpt.scaler.inverse(scaled), rtol=1e-5)  # to 6 significant digits
    assert (values.min(0) <= point).all() and (point <= values.max(0)).all()
    change = np.abs(np.diff(context[0].numpy(), axis=0)).mean(axis=0)  # (C,) the context's scale (season 1 at L 16)
    width = ckpt.calibration.widths[0].numpy() * change * ckpt.scaler.std  # (H, C): the 80 % half-width, CSV units
    np.testing.assert_allclose(forecast[["a_upper_80", "b_upper_80"]].to_numpy() - point, width, rtol=1e-4)


def test_predict_matches_evaluate_on_the_first_test_window(run, tmp_path, monkeypatch):
    """predict on the CSV cut at the first test window's origin forecasts what evaluate scores for that window."""
    import tsformer.evaluate as evaluate_module
    import tsformer.runs as runs_module

    scored = []  # (forecast, truth) per forecaster, scaled, (N, H, C); the model's first
    score = evaluate_module.score

    def recording_score(forecast, truth, *args, **kwargs):
        scored.append((forecast, truth))
        return score(forecast, truth, *args, **kwargs)

    monkeypatch.setattr(evaluate_module, "score", recording_score)
    runs_module.evaluate_run(run, write=False)
    model_forecast, truth = scored[0]

    ckpt = load_predictor(run / "model.pt")
    origin = int(ckpt.borders.val_end[0])  # the first test target row: the validation split's end
    lines = (run.parent / "data.csv").read_text().splitlines(keepends=True)
    frame = pd.read_csv(run.parent / "data.csv")
    future = frame.iloc[origin : origin + 4]
    np.testing.assert_allclose(ckpt.scaler.inverse(truth[0]), future[["a", "b"]].to_numpy(), rtol=1e-5)  # window 0

    cut = tmp_path / "cut.csv"
    cut.write_text("".join(lines[: 1 + origin]))  # the header and rows 0 .. origin - 1, byte for byte
    forecast = predict_run(run, cut).frame
    assert list(forecast["date"].dt.strftime("%Y-%m-%d %H:%M:%S")) == list(future["date"])
    np.testing.assert_allclose(forecast[["a", "b"]].to_numpy(), ckpt.scaler.inverse(model_forecast[0]), rtol=1e-5)


def _forecast_csv(tmp_path, frame: pd.DataFrame, *flags: str) -> pd.DataFrame:
    """Train a tiny model on `frame` (horizon 4) and return the CSV `tsformer predict` writes, read as text."""
    import io

    from helpers import TINY_FLAGS
    from typer.testing import CliRunner

    from tsformer.cli import app

    csv = write_csv(tmp_path / "data.csv", frame)
    result = CliRunner().invoke(
        app, ["train", str(csv), "--out", str(tmp_path / "run"), "--quiet", *TINY_FLAGS, *flags]
    )
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["predict", str(tmp_path / "run"), str(csv)])
    assert result.exit_code == 0, result.output
    return pd.read_csv(io.StringIO(result.stdout), dtype=str)


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        (pd.date_range("2004-01-01", periods=120, freq="MS").strftime("%Y-%m"), ["2014-01", "2014-02"]),
        ([f"{1990 + i // 4} Q{i % 4 + 1}" for i in range(120)], ["2020 Q1", "2020 Q2"]),
        ((1167609600 + 3600 * np.arange(120)) * 1000, ["1168041600000", "1168045200000"]),
        (pd.date_range("2024-01-01", periods=120, freq="D").strftime("%d/%m/%Y"), ["30/04/2024", "01/05/2024"]),
        (
            [t.isoformat() for t in pd.date_range("2023-01-01", periods=120, freq="h", tz="Asia/Kolkata")],
            ["2023-01-06T00:00:00+05:30", "2023-01-06T01:00:00+05:30"],  # %z alone wrote +0530 (and lost the T)
        ),
        (
            pd.date_range("2023-01-01", periods=120, freq="100ms").strftime("%Y-%m-%d %H:%M:%S.%f").str[:-3],
            ["2023-01-01 00:00:12.000", "2023-01-01 00:00:12.100"],  # %f's six digits gave 12 then 12.100000
        ),
        ([f"{2004 + i // 12}-{i % 12 + 1:02d}-15" for i in range(120)], ["2014-01-15", "2014-02-15"]),  # no freq
        ([f"15/06/{1900 + i}" for i in range(120)], ["15/06/2020", "15/06/2021"]),  # yearly, day-first
    ],
    ids=["months", "quarters", "epoch-ms", "day-first", "iso-offset", "milliseconds", "mid-month", "mid-june"],
)
def test_the_forecast_writes_times_as_the_data_wrote_them(tmp_path, times, expected):
    frame = pd.DataFrame({"t": times, "y": np.sin(np.arange(120) / 3) + 5}).rename(columns={"t": "time"})
    forecast = _forecast_csv(tmp_path, frame, "--dayfirst") if "/" in str(times[0]) else _forecast_csv(tmp_path, frame)
    assert forecast["time"].tolist()[:2] == expected


def test_a_time_zone_writes_each_forecast_step_at_its_own_offset(tmp_path):
    # Berlin's hours up to the night clocks go forward: read at one offset (+01:00, the default) the forecast's
    # third hour was written 02:00+01:00, an hour local clocks never show
    hours = pd.date_range("2021-03-23", "2021-03-27 23:00", freq="h", tz="Europe/Berlin")
    frame = pd.DataFrame({"time": [t.isoformat() for t in hours], "y": np.sin(np.arange(len(hours)) / 3) + 5})
    forecast = _forecast_csv(tmp_path, frame, "--set", "data.time_zone=Europe/Berlin")
    assert forecast["time"].tolist() == [
        "2021-03-28T00:00:00+01:00",
        "2021-03-28T01:00:00+01:00",
        "2021-03-28T03:00:00+02:00",
        "2021-03-28T04:00:00+02:00",
    ]
    naive = frame.assign(time=hours.tz_localize(None).strftime("%Y-%m-%d %H:%M:%S"))
    zone = ["--set", "data.time_zone=Europe/Berlin", "--out", str(tmp_path / "naive")]
    result = invoke("train", write_csv(tmp_path / "naive.csv", naive), *zone)
    assert_error(result, "writes no UTC offsets, so data.time_zone=Europe/Berlin cannot place its times")
    both = invoke("train", tmp_path / "naive.csv", *zone, "--set", "data.utc_offset=+01:00")
    assert_error(both, "data.utc_offset and data.time_zone both set")


def test_forecast_values_carry_no_float32_noise(tmp_path):
    frame = make_frame(240, 1)
    frame["a"] = 5.08
    frame.loc[::2, "a"] = 5.07  # a spread of 0.005 about 5.075: float32 holds 8 digits of it, no more
    forecast = _forecast_csv(tmp_path, frame, "--set", "train.fallback=false")
    digits = [len(value.replace("-", "").replace(".", "").strip("0")) for value in forecast["a"]]
    assert max(digits) <= 8  # float32's digits, not float64's 5.079999923706055


@pytest.mark.parametrize(
    "value, spread",
    [(5.08, 1.0), (5.08, 0.005), (25_000_846.0, 50.0), (250_000.38, 1e4), (0.0100131, 3e-4), (-3.14159, 2.0)],
    ids=["decimal", "narrow", "meter-reading", "revenue", "rate", "negative"],
)
def test_a_value_the_data_held_comes_back_as_the_data_wrote_it(value, spread):
    """Scaled as `prepare` scales (float32 statistics, float32 result) and back: the decimal the CSV held, whatever
    the level's size against its spread (6 significant digits took a meter reading of 25,000,846 to 25,000,800)."""
    from tsformer.results import Forecasts

    mean, std = np.float32(value + 0.37 * spread), np.float32(spread)  # a series' training statistics
    scaled = np.float32((np.float64(np.float32(value)) - mean) / std)  # (x - mean) / std in float64, then float32
    point = torch.full((1, 1, 1), float(scaled))
    shipped = Forecasts({"model": point}, point, None, None, (), (), np.array([[mean]]), np.array([[std]]), None)
    assert repr(float(shipped.units(point)[0, 0, 0])) == repr(value)


def test_business_day_forecasts_skip_weekends(tmp_path):
    days = pd.bdate_range("2023-01-02", periods=200).delete([20, 100])  # holidays
    frame = pd.DataFrame({"Date": days.strftime("%Y-%m-%d"), "Close": 100 + np.sin(np.arange(len(days)))})
    forecast = _forecast_csv(tmp_path, frame)
    stamps = pd.to_datetime(forecast["Date"])
    assert days[-1] == pd.Timestamp("2023-10-06") and days[-1].day_of_week == 4  # the data end on a Friday
    assert (stamps.dt.day_of_week < 5).all() and forecast["Date"].tolist() == [
        "2023-10-09",
        "2023-10-10",
        "2023-10-11",
        "2023-10-12",
    ]


def test_data_floor_zero_floors_a_column_that_never_reached_zero_and_refuses_negative_values(tmp_path):
    """A positive column that never reached zero is not floored by default (its 95 % lower bounds go below zero);
    with data.floor=zero they stop at zero, and a target below zero is refused (data.floor=none floors nothing)."""
    frame = make_frame(n_rows=240, n_series=1)
    frame["a"] = frame["a"] - frame["a"].min() + 0.05  # positive, its lowest 0.05
    frame["count"] = np.random.default_rng(1).poisson(0.7, len(frame)).astype(float) + 0.05
    csv = write_csv(tmp_path / "positive.csv", frame)
    bounds = [f"{column}_lower_95" for column in ("a", "count")]
    lows, notes = {}, {}
    for rule in ("auto", "zero"):
        cfg = tiny_config(csv)
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, floor=rule))
        train(cfg, tmp_path / rule, show_progress=False)
        forecast = predict_run(tmp_path / rule, csv)
        lows[rule], notes[rule] = forecast.frame[bounds].to_numpy(), [n for n in forecast.notes if "below zero" in n]
    assert (lows["auto"][:, 1] < 0).any()  # the default leaves a column that never reached zero alone
    assert len(notes["auto"]) == 1 and "95 % lower bounds go below zero for" in notes["auto"][0]
    assert "count" in notes["auto"][0] and "--set data.floor=zero" in notes["auto"][0] and not notes["zero"]
    assert (lows["zero"] >= 0).all() and (lows["zero"][:, 1] == 0).any()  # declared: floored, and it acted
    predictor = load_predictor(tmp_path / "zero" / "model.pt")
    assert np.isneginf(predictor.scaler.floors("none")).all()

    frame["count"] = frame["count"] - 0.5  # now below zero in some rows
    negative = write_csv(tmp_path / "negative.csv", frame)
    with pytest.raises(DataError, match="but column 'count' has .* values below zero .*data.floor=auto or none"):
        predict_run(tmp_path / "zero", negative)  # nor a file it forecasts from
    cfg = tiny_config(negative)
    with pytest.raises(DataError, match="data.floor=zero says no target goes below zero, but column 'count' has"):
        train(
            dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, floor="zero")),
            tmp_path / "no",
            show_progress=False,
        )
    assert not (tmp_path / "no").exists()


def test_a_count_column_is_never_forecast_below_zero_and_is_scored_as_shipped(tmp_path):
    """A column of small counts (zeros in training, never negative) beside one that goes below zero: the counts'
    point forecasts and interval bounds stay at or above zero, the other column's are not floored, and evaluate
    scores the floored intervals it ships."""
    from tsformer.evaluate import evaluate

    frame = make_frame(n_rows=240, n_series=1)
    frame["count"] = np.random.default_rng(1).poisson(0.7, len(frame)).astype(float)
    csv = write_csv(tmp_path / "counts.csv", frame)
    train(tiny_config(csv), tmp_path / "run", show_progress=False)
    predictor = load_predictor(tmp_path / "run" / "model.pt")
    forecast = predict_run(tmp_path / "run", csv).frame
    bounds = [f"count_{side}_{level}" for level in ("80", "95") for side in ("lower", "upper")]
    assert (forecast[["count", *bounds]] >= 0).all().all()
    assert (forecast["count_lower_95"] == 0).any()  # the floor acted: +- the 95 % width reaches below zero
    assert (forecast["a_lower_95"] < 0).any()  # a sine around 0: no floor

    data = predictor.read(csv)
    report = evaluate(predictor, data)
    windows = data.split_windows("test")
    cut = windows.split(predictor.context_len)
    shipped = predictor.forecast(cut, windows.series())
    level, lower, upper = shipped.scaled_bounds()[0]  # 80 %
    truth = cut.target.numpy()[..., 1]
    inside = ((truth >= lower[..., 1]) & (truth <= upper[..., 1])).mean()
    scored = report.intervals["80"]["per_column"]["count"]
    assert level == 0.8 and scored["coverage"] == pytest.approx(inside)
    assert scored["width"] == pytest.approx(((upper - lower)[..., 1] * shipped.std[:, None, 1]).mean(), rel=1e-5)
    assert (lower[..., 1] >= shipped.floor[:, :, 1] - 1e-6).all()
    assert scored["width"] < 2 * (shipped.half_widths[0][..., 1] * shipped.std[:, None, 1]).mean()  # floored


def test_a_forecast_at_the_zero_floor_is_written_as_zero_not_a_rounding_error():
    """Scaled, the floor is -mean/std in float32; back in units it was 5.96e-08 and the like. Values above it and
    columns without a floor (-inf) convert as before."""
    from tsformer.results import Forecasts

    mean, std = np.array([[10.0, 10.0]]), np.array([[3.0, 3.0]])
    floor = np.array([[[np.float32(-10.0 / 3.0), -np.inf]]], dtype=np.float32)  # (N, 1, C): column 0 floored
    point = torch.tensor([[[floor[0, 0, 0], floor[0, 0, 0] - 0.5], [1.0, 1.0]]])  # (1, H=2, C=2)
    chosen = np.array([["model", "model"]], dtype=object)
    shipped = Forecasts({"model": point}, point, None, None, (), (), mean, std, chosen, floor)
    units = shipped.units(point)
    assert units[0, 0, 0] == 0.0 and units[0, 0, 1] == pytest.approx(-1.5)  # only the floored column is pinned
    np.testing.assert_allclose(units[0, 1], [13.0, 13.0])
    quantiles = shipped.units(torch.stack([point, point + 1], dim=-1))  # (N, H, C, Q)
    assert quantiles[0, 0, 0, 0] == 0.0 and quantiles[0, 0, 0, 1] == pytest.approx(3.0)
