import json

import numpy as np
import pytest
import torch
from helpers import tiny_config

from tsformer.data import training_data
from tsformer.evaluate import format_report
from tsformer.metrics import mase_scale, repeat_last, score, season_length, seasonal_naive, usable_season
from tsformer.predictor import load_predictor
from tsformer.runs import evaluate_run
from tsformer.train import train


def test_baselines():
    context = torch.arange(10, dtype=torch.float32).view(1, 10, 1)
    assert repeat_last(context, 3)[0, :, 0].tolist() == [9, 9, 9]
    assert seasonal_naive(context, 5, season=3)[0, :, 0].tolist() == [7, 8, 9, 7, 8]
    assert season_length("h") == 24 and season_length("15min") == 96 and season_length("W-SUN") == 52


def test_score_against_hand_computed_values():
    forecast = np.array([[[1.0, 0.0], [2.0, 0.0]]])  # (N=1, H=2, C=2)
    truth = np.array([[[0.0, 0.0], [0.0, 1.0]]])
    mean, std = np.array([[10.0, 0.0]]), np.array([[2.0, 10.0]])  # (1, C)
    result = score(forecast, truth, mean, std, ("x", "y"), mase_denominator=np.array([[1.0, 5.0]]))
    x, y = result["per_column"]["x"], result["per_column"]["y"]
    assert x["mse"] == pytest.approx(2.5) and x["mae"] == pytest.approx(1.5)
    assert x["mae_original"] == pytest.approx(3.0) and x["rmse_original"] == pytest.approx(np.sqrt(10))
    assert y["mse"] == pytest.approx(0.5) and y["mase"] == pytest.approx(5.0 / 5.0)
    # sMAPE in original units: x forecasts 12, 14 for truth 10, 10 -> 200*2/22, 200*4/24; y: 0 vs 0 -> 0, 0 vs 10 -> 200
    assert x["smape"] == pytest.approx((400 / 22 + 800 / 24) / 2) and y["smape"] == pytest.approx(100.0)
    assert result["mean"]["mse"] == pytest.approx(1.5)


def test_mase_scale_is_the_seasonal_naive_mae_on_training_rows():
    values = np.array([[1.0], [2.0], [4.0], [7.0]])
    assert mase_scale(values, season=1).tolist() == [2.0]
    assert mase_scale(values, season=2).tolist() == [4.0]
    assert mase_scale(values, season=3).tolist() == [6.0]  # row 3 has a row a season before it
    assert mase_scale(values, season=4).tolist() == [2.0]  # none has: season 1


def test_one_season_rule_for_the_baseline_the_scale_and_the_report():
    assert usable_season(24, 96) == 24 and usable_season(24, 24) == 24 and usable_season(24, 23) == 1
    context = torch.arange(10, dtype=torch.float32).view(1, 10, 1)
    assert seasonal_naive(context, 3, season=24)[0, :, 0].tolist() == [9, 9, 9]  # no full season: repeat the last
    assert seasonal_naive(context, 3, season=10)[0, :, 0].tolist() == [0, 1, 2]


def test_evaluate_scores_every_test_window(tiny_csv, tmp_path):
    train(tiny_config(tiny_csv, fallback=False), tmp_path / "run", show_progress=False)  # the model's own scores
    report = evaluate_run(tmp_path / "run")
    assert report.n_windows == 240 - 192 - 4 + 1  # test targets are rows 192..239 (70/10/20 split)
    assert report.season == 1  # hourly: 24, more than the 16-step context
    cfg = load_predictor(tmp_path / "run" / "model.pt").config
    windows = training_data(cfg).split_windows("test").split(16)  # contexts, targets and calendar features
    model = load_predictor(tmp_path / "run" / "model.pt").model
    by_hand = (model.predict(windows.context, None, windows.covariates) - windows.target).square().mean().item()
    assert report.scores["model"]["mean"]["mse"] == pytest.approx(by_hand, rel=1e-5)
    assert set(report.scores) == {"model", "repeat_last", "seasonal_naive", "drift", "seasonal_drift"}
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["scores"]["model"]["mean"]["mse"] == pytest.approx(report.scores["model"]["mean"]["mse"])
    assert (tmp_path / "run" / "test_windows.png").stat().st_size > 1000
    text = format_report(report)
    assert "test windows: 45" in text and "seasonal_naive" in text


def test_evaluate_on_validation_scores_the_validation_windows_and_writes_nothing(tiny_csv, tmp_path):
    result = train(tiny_config(tiny_csv, fallback=False), tmp_path / "run", show_progress=False).summary
    report = evaluate_run(tmp_path / "run", split="val")
    assert report.split == "val" and report.n_windows == 192 - 168 - 4 + 1
    assert report.scores["model"]["mean"]["mse"] == pytest.approx(result.best_val_loss, rel=1e-5)
    assert not (tmp_path / "run" / "metrics.json").exists()
    text = format_report(report)
    assert text.startswith("validation windows: 21")
    assert "of validation points (those it was calibrated on)" in text and "test points" not in text


def test_smape_is_noted_where_many_test_points_are_zero():
    from tsformer.evaluate import _smape_note

    mean, std = np.array([[2.0, 2.0]]), np.array([[4.0, 4.0]])  # (N=1, C): the value 0 is -0.5 scaled
    truth = torch.tensor([[[-0.5, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]])  # (1, H=5, C=2)
    assert _smape_note(truth[..., :1], None, mean[:, :1], std[:, :1], ("a",), "test") == (
        "sMAPE: 20% of test points are 0, where a forecast of exactly 0 scores 0 % and any other 200 %, so it "
        "favours forecasts of 0; compare MAE and MASE on such data"
    )
    # per column: one zero of five in a, none in b
    assert _smape_note(truth, None, mean, std, ("a", "b"), "validation").startswith(
        "sMAPE: validation points are 0 (a: 20%), where"
    )
    observed = torch.ones_like(truth, dtype=torch.bool)
    observed[0, 1:, 0] = False  # an unobserved point is not scored: 1 zero of 1
    assert "(a: 100%)" in _smape_note(truth, observed, mean, std, ("a", "b"), "test")
    truth[0, 0, 0] = -0.5 + 1e-5  # 4e-5 above 0 in units (a sale of 1 at a scale of 100,000): no zero left
    assert _smape_note(truth, None, mean, std, ("a", "b"), "test") == ""
