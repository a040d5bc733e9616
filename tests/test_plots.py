"""The figures: each long-format forecast panel on its own dates, titles with dates, the backtest's model on top."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from helpers import make_frame, tiny_config, write_csv
from test_long_format import long_frame

import tsformer.evaluate as evaluate_module
import tsformer.plots as plots
from tsformer.predict import _plotted, forecast_after
from tsformer.train import train


@pytest.fixture
def figures(monkeypatch):
    """Every figure the code saves, kept open instead of written."""
    saved = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: saved.append(fig))
    return saved


def test_each_series_of_a_long_forecast_plot_has_its_own_dates(tmp_path, figures):
    frame = long_frame({"A": 120, "B": 96, "C": 150})
    frame.loc[frame.unique_id == "C", "ds"] = (
        pd.to_datetime(frame.loc[frame.unique_id == "C", "ds"]) + pd.Timedelta(days=400)
    ).dt.strftime("%Y-%m-%d %H:%M:%S")  # C a year later than the others
    cfg = tiny_config()
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, intervals=(0.5, 0.75)))  # 3 windows hold them
    predictor = train(cfg, source=frame, show_progress=False)
    forecast = forecast_after(predictor, frame)
    panels, title = _plotted(predictor, predictor.data.frame, forecast.frame)
    assert [label for label, _, _ in panels] == ["y of A", "y of B", "y of C"]
    assert title == "the next 4 steps of the first 3 of 3 series in the file (y)"
    for (_, history, ahead), uid in zip(panels, "ABC", strict=True):
        own = pd.to_datetime(frame[frame.unique_id == uid]["ds"])
        assert history.index.min() >= own.min() and history.index.max() == own.max()  # its own dates only
        assert not history.isna().any() and len(history) == 16  # the last 4 horizons, no other series' gaps
        assert ahead.index[0] == own.max() + pd.Timedelta(hours=1)
        assert {"forecast", "lower_50", "upper_50", "lower_75", "upper_75"} <= set(ahead.columns)
    plots.plot_forecast(panels, title, tmp_path / "fan.png")
    axes = figures[-1].axes
    assert len(axes) == 3 and axes[2].get_xlim()[0] > axes[0].get_xlim()[1]  # no shared axis: C's dates are later
    made_by = forecast.frame.groupby("unique_id", sort=False)["forecaster"].first().tolist()  # each series' own
    assert [ax.get_title(loc="right") for ax in axes] == [f"forecast by {name}" for name in made_by]


def test_test_window_titles_give_dates_and_the_axis_the_column(tmp_path, monkeypatch):
    csv = write_csv(tmp_path / "data.csv", make_frame(n_rows=240))
    predictor = train(tiny_config(csv), tmp_path / "run", show_progress=False)
    drawn = {}
    monkeypatch.setattr(plots, "plot_windows", lambda *args: drawn.update(titles=args[3], column=args[4]))
    evaluate_module.write_report(evaluate_module.evaluate(predictor, predictor.read()), predictor.read(), tmp_path)
    assert drawn["column"] == "b"
    assert drawn["titles"][0] == "b, forecast from 2024-01-09 00:00:00" and "row" not in " ".join(drawn["titles"])


def test_the_backtest_plot_draws_the_model_on_top(figures):
    summary = pd.DataFrame({
        "origin": ["o1", "o1", "o1", "o2", "o2", "o2"],
        "forecaster": ["model", "repeat_last", "seasonal_naive"] * 2,
        "mase": [1.0, 1.0, 2.0, 1.5, 1.5, 2.5],  # the model fell back to repeat-last: the same line
    })  # fmt: skip
    plots.plot_backtest(summary, "unused.png")
    lines = figures[-1].axes[0].get_lines()
    assert lines[-1].get_label() == "model (shipped)" and lines[-1].get_zorder() > max(
        x.get_zorder() for x in lines[:-1]
    )
    np.testing.assert_array_equal(lines[-1].get_ydata(), [1.0, 1.5])


def test_a_forecaster_that_some_backtest_folds_lack_is_drawn_at_its_own_origins(figures):
    summary = pd.DataFrame({
        "origin": ["o1", "o1", "o2", "o2", "o2"],
        "forecaster": ["model", "repeat_last", "model", "repeat_last", "weekly_naive"],  # o1's context: under a week
        "mase": [1.0, 2.0, 1.5, 2.5, 0.5],
    })  # fmt: skip
    plots.plot_backtest(summary, "unused.png")
    weekly = next(line for line in figures[-1].axes[0].get_lines() if line.get_label() == "weekly_naive")
    np.testing.assert_array_equal(weekly.get_xdata(), [1])  # o2, not o1


def test_each_target_of_a_wide_forecast_plot_names_its_own_forecaster(tmp_path, figures):
    frame = make_frame(n_rows=240)  # targets a and b: predict writes a_forecaster and b_forecaster
    predictor = train(tiny_config(), source=frame, show_progress=False)
    forecast = forecast_after(predictor, frame).frame
    panels, title = _plotted(predictor, predictor.data.frame, forecast)
    assert [label for label, _, _ in panels] == ["a", "b"] and title == "the next 4 steps of each target"
    plots.plot_forecast(panels, title, tmp_path / "fan.png")
    titles = [ax.get_title(loc="right") for ax in figures[-1].axes]
    assert titles == [f"forecast by {forecast[f'{name}_forecaster'].iloc[0]}" for name in "ab"]
