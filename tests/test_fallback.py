"""Never worse than naive on validation: each column keeps the forecaster that did best there."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import TINY_FLAGS
from typer.testing import CliRunner

from tsformer.cli import app
from tsformer.fallback import apply, decide
from tsformer.predictor import load_predictor
from tsformer.runs import evaluate_run, predict_run


def test_each_column_keeps_its_best_forecaster_on_validation():
    truth = torch.zeros(4, 2, 3)  # (N, H, C)
    forecasts = {
        "model": torch.tensor([0.1, 1.0, 0.5]).expand(4, 2, 3),
        "repeat_last": torch.tensor([0.2, 0.3, 0.5]).expand(4, 2, 3),
        "seasonal_naive": torch.tensor([0.3, 0.4, 0.5]).expand(4, 2, 3),
    }
    decision = decide(forecasts, truth, None, ("a", "b", "c"))
    assert decision.choice == (("model", "repeat_last", "model"),)  # one series; a tie keeps the model
    assert decision.val_error["model"][0] == pytest.approx((0.01, 1.0, 0.25))
    assert decision.lines()[1] == "b: model 1 vs repeat-last 0.09 on validation: using repeat-last"
    assert decide(forecasts, truth, None, ("a", "b", "c"), enabled=False).choice == (("model",) * 3,)
    combined = apply(decision.choice, forecasts)
    assert combined[0, 0].tolist() == pytest.approx([0.1, 0.3, 0.5])


def test_unobserved_validation_cells_do_not_count():
    truth = torch.tensor([[[0.0], [100.0]]])  # (1, 2, 1): the second cell is unobserved
    observed = torch.tensor([[[True], [False]]])
    forecasts = {"model": torch.zeros(1, 2, 1), "repeat_last": torch.full((1, 2, 1), 100.0)}
    forecasts["seasonal_naive"] = forecasts["repeat_last"]
    assert decide(forecasts, truth, observed, ("y",)).choice == (("model",),)


def test_each_series_keeps_its_best_forecaster_and_one_without_validation_keeps_the_model():
    truth = torch.zeros(4, 2, 1)  # (N, H, C): windows of series 0, 0, 1, 1; series 2 has none
    forecasts = {
        "model": torch.tensor([0.1, 0.1, 2.0, 2.0]).view(4, 1, 1).expand(4, 2, 1),
        "repeat_last": torch.tensor([1.0, 1.0, 0.5, 0.5]).view(4, 1, 1).expand(4, 2, 1),
        "seasonal_naive": torch.ones(4, 2, 1),
    }
    ids = np.array([0, 0, 1, 1])
    decision = decide(forecasts, truth, None, ("y",), ids=ids, n_ids=3)
    assert decision.choice == (("model",), ("repeat_last",), ("model",))
    assert np.isnan(decision.val_error["model"][2, 0])
    assert "chosen per series: the model in 2, repeat-last in 1 of 3 series" in decision.lines()[0]
    shipped = apply(decision.choice, forecasts, ids)
    assert shipped[:, 0, 0].tolist() == pytest.approx([0.1, 0.1, 0.5, 0.5])


def _train(tmp_path, values: np.ndarray, *extra: str):
    csv = tmp_path / "series.csv"
    dates = pd.date_range("2024-01-01", periods=len(values), freq="h").strftime("%Y-%m-%d %H:%M:%S")
    pd.DataFrame({"date": dates, "y": values}).to_csv(csv, index=False)
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", str(csv), "--out", str(run), "--quiet", *TINY_FLAGS, *extra])
    assert result.exit_code == 0, result.output
    return csv, run, result.stdout


def test_a_random_walk_falls_back_to_repeat_last_everywhere_it_is_used(tmp_path):
    walk = np.cumsum(np.random.default_rng(0).normal(size=600)) + 100
    csv, run, output = _train(tmp_path, walk)
    assert load_predictor(run / "model.pt").fallback == (("repeat_last",),)
    assert output.strip().splitlines()[-1].endswith("on validation: using repeat-last")
    forecast = predict_run(run, csv).frame["y"].to_numpy()
    np.testing.assert_allclose(forecast, walk[-1], rtol=1e-5)  # the last value, repeated, in the CSV's units
    report = evaluate_run(run, write=False)
    assert report.scores["model"]["mean"] == report.scores["repeat_last"]["mean"]


def test_a_seasonal_series_with_a_trend_keeps_the_model(tmp_path):
    t = np.arange(600)
    series = 0.05 * t + 3 * np.sin(2 * np.pi * t / 24) + np.random.default_rng(0).normal(0, 0.1, len(t))
    _, run, output = _train(tmp_path, series, "--epochs", "6")
    decision = load_predictor(run / "model.pt").fallback
    assert decision == (("model",),), output
    assert output.strip().splitlines()[-1].endswith("on validation: using the model")


def test_no_fallback_always_uses_the_model(tmp_path):
    walk = np.cumsum(np.random.default_rng(0).normal(size=600)) + 100
    _, run, output = _train(tmp_path, walk, "--no-fallback")
    assert load_predictor(run / "model.pt").fallback == (("model",),)
    assert output.strip().splitlines()[-1].endswith("using the model")


def test_every_forecast_row_names_its_forecaster_and_predict_says_when_it_is_not_the_model(tmp_path):
    walk = np.cumsum(np.random.default_rng(0).normal(size=600)) + 100  # repeat-last beats the model
    csv, run, _ = _train(tmp_path, walk)
    result = CliRunner().invoke(app, ["predict", str(run), str(csv)])
    assert result.exit_code == 0, result.output
    forecast = pd.read_csv(io.StringIO(result.stdout))
    assert list(forecast.columns)[-1] == "forecaster" and (forecast["forecaster"] == "repeat_last").all()
    assert (
        "forecast by a classical candidate, or the model blended with one, which beat the model on validation: y by "
        "repeat-last (the forecaster "
        "column names each row's; --no-fallback ships the model everywhere)"
    ) in result.stderr
    report = evaluate_run(run, write=False)  # the model's own row beside the shipped one
    assert list(report.scores) == ["model", "model_alone", "repeat_last", "seasonal_naive", "drift", "seasonal_drift"]
    assert report.scores["model_alone"]["mean"]["mse"] > report.scores["model"]["mean"]["mse"]
    (tmp_path / "plain").mkdir()
    plain = _train(tmp_path / "plain", walk, "--no-fallback")[1]
    quiet = CliRunner().invoke(app, ["predict", str(plain), str(csv)])
    assert "naive forecaster" not in quiet.stderr
    assert set(pd.read_csv(io.StringIO(quiet.stdout))["forecaster"]) == {"model"}
    assert "model_alone" not in evaluate_run(plain, write=False).scores  # nothing to show beside the model


def test_several_targets_and_series_name_their_forecaster_per_column():
    from tsformer.fallback import chosen, not_the_model

    choice = (("model", "repeat_last"), ("seasonal_naive", "model"))  # two series, two columns
    names = chosen(choice, np.array([0, 1, -1]), 2)  # -1: a series not trained on, which the model forecasts
    assert names.tolist() == [["model", "repeat_last"], ["seasonal_naive", "model"], ["model", "model"]]
    line = not_the_model(names, ("a", "b"), per_series=True)
    assert "a in 1 of 3 series (seasonal naive in 1); b in 1 of 3 series (repeat-last in 1)" in line
    assert not_the_model(chosen((), np.array([0]), 2), ("a", "b"), per_series=False) == ""


def test_a_blend_wins_where_the_model_and_a_candidate_err_on_opposite_sides():
    truth = torch.zeros(6, 4, 1)
    forecasts = {"model": truth + 1.0, "repeat_last": truth + 3.0, "seasonal_naive": truth - 1.2}
    decision = decide(forecasts, truth, None, ("y",), ids=np.repeat([0, 1], 3), n_ids=2)
    assert decision.choice == (("blend_seasonal_naive",), ("blend_seasonal_naive",))
    assert decision.val_error["blend_seasonal_naive"][0, 0] == pytest.approx(0.01)  # (1 - 1.2) / 2, squared
    shipped = apply(decision.choice, forecasts, np.repeat([0, 1], 3))
    assert torch.allclose(shipped, torch.full((6, 4, 1), -0.1))
    assert "the model blended with seasonal naive in 2 of 2 series" in decision.lines()[0]


def test_the_selection_metric_mae_weighs_one_large_miss_less_than_mse():
    truth = torch.zeros(2, 4, 1)
    forecasts = {"model": truth + torch.tensor([0.0, 0.0, 0.0, 3.0]).view(1, 4, 1), "repeat_last": truth + 1.0}
    assert decide(forecasts, truth, None, ("y",)).choice == (("repeat_last",),)  # MSE: 9/4 against 1
    by_mae = decide(forecasts, truth, None, ("y",), metric="mae")
    assert by_mae.choice == (("model",),) and by_mae.val_error["model"][0, 0] == pytest.approx(0.75)
    assert by_mae.lines()[0].startswith("y: model 0.75 vs repeat-last 1 on validation MAE: using the model")
