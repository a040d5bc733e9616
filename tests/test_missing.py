"""Gaps: NaN cells and missing timestamps are unobserved cells, masked in the inputs, the loss and the metrics,
never filled from later rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import TINY_FLAGS, layout_of, make_frame, tiny_config, write_csv
from typer.testing import CliRunner

from tsformer.cli import app
from tsformer.config import DataConfig, ModelConfig
from tsformer.data import Scaler, read_series, training_data
from tsformer.data.loader import require_values
from tsformer.errors import DataError
from tsformer.metrics import forward_fill, score
from tsformer.model import Forecaster
from tsformer.runs import evaluate_run, predict_run


def _holey(n_rows: int = 240, drop_rows=(50, 51, 120), nan_cells=((30, "a"), (31, "a"), (200, "b"))) -> pd.DataFrame:
    frame = make_frame(n_rows)
    for row, column in nan_cells:
        frame.loc[row, column] = np.nan
    return frame.drop(index=list(drop_rows))


def test_nan_cells_and_missing_timestamps_become_unobserved_cells(tmp_path):
    frame = read_series(write_csv(tmp_path / "holes.csv", _holey()), DataConfig())
    assert frame.n_rows == 240 and frame.freq == "h"  # the three dropped hours are back, as unobserved rows
    assert not frame.observed[[50, 51, 120]].any()
    assert not frame.observed[30, 0] and not frame.observed[31, 0] and not frame.observed[200, 1]
    assert frame.observed.sum() == 240 * 2 - 3 * 2 - 3
    assert np.isnan(frame.values[~frame.observed]).all() and np.isfinite(frame.values[frame.observed]).all()
    assert frame.notes == (
        "3 timestamps missing from the h grid (first 2024-01-03 02:00:00) became unobserved steps",
        "9 missing or infinite cells (5 of 'a', 4 of 'b') are unobserved: masked in the inputs, the loss and the "
        "metrics (or pass --fill ffill or zero)",
    )


def test_a_daily_series_with_a_few_missing_dates_trains_evaluates_and_predicts(tmp_path):
    frame = make_frame(400, freq="D").drop(index=[100, 250, 251])
    csv = write_csv(tmp_path / "daily.csv", frame)
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", str(csv), "--out", str(run), "--quiet", *TINY_FLAGS])
    assert result.exit_code == 0, result.output
    assert "3 timestamps missing from the D grid (first 2024-04-10 00:00:00) became unobserved steps" in result.stderr
    report = evaluate_run(run, write=False)
    assert np.isfinite(report.scores["model"]["mean"]["mse"])
    forecast = predict_run(run, csv).frame
    assert forecast["date"].iloc[0] == pd.Timestamp("2025-02-04")
    assert np.isfinite(forecast.select_dtypes("number").to_numpy()).all() and forecast.shape[1] == 2 * 5 + 1 + 2


def test_a_grid_mostly_missing_is_irregular_data_not_gaps(tmp_path):
    frame = make_frame(100, freq="3h")
    frame.loc[50:, "date"] = pd.date_range("2024-01-07 07:00", periods=50, freq="5h").strftime("%Y-%m-%d %H:%M:%S")
    with pytest.raises(Exception, match="irregular spacing"):
        read_series(write_csv(tmp_path / "odd.csv", frame), DataConfig())


def test_the_scaler_uses_observed_training_cells_only():
    values = np.array([[1.0, 10.0], [np.nan, 20.0], [3.0, np.nan], [5.0, 40.0]], dtype=np.float32)
    scaler = Scaler.fit(values)
    np.testing.assert_allclose(scaler.mean, [[3.0, 70 / 3]], rtol=1e-6)
    np.testing.assert_allclose(scaler.std, [[np.std([1, 3, 5]), np.std([10, 20, 40])]], rtol=1e-6)


def test_prepare_zeroes_unobserved_cells_and_carries_their_mask(tmp_path):
    data = training_data(tiny_config(write_csv(tmp_path / "holes.csv", _holey())))
    observed = data.inputs.observed
    assert observed is not None and not observed[30, 0] and data.inputs.target[30, 0] == 0.0
    windows, masks = data.windows("train"), data.observed_windows("train")
    assert masks.shape == windows.shape and masks.dtype == torch.bool
    assert not masks[30 - 0, 0, 0] and masks[:, :, :].sum() < masks.numel()
    complete = training_data(tiny_config(write_csv(tmp_path / "full.csv", make_frame())))
    assert complete.inputs.observed is None and complete.observed_windows("train") is None


def test_the_loss_ignores_unobserved_targets():
    torch.manual_seed(0)
    model = Forecaster(
        ModelConfig(context_len=16, horizon=4, patch_len=4, d_model=8, n_heads=2, d_ff=16), layout_of(2)
    ).eval()
    x, target = torch.randn(3, 16, 2), torch.randn(3, 4, 2)
    observed = torch.rand(3, 4, 2) > 0.3
    forecast, loss = model(x, target=target, target_observed=observed)
    expected = ((forecast - target)[observed] ** 2).mean()
    torch.testing.assert_close(loss, expected)
    poisoned = torch.where(observed, target, torch.full_like(target, 1e6))
    torch.testing.assert_close(model(x, target=poisoned, target_observed=observed)[1], loss)


def test_unobserved_input_cells_change_no_forecast():
    torch.manual_seed(0)
    model = Forecaster(
        ModelConfig(context_len=16, horizon=4, patch_len=4, d_model=8, n_heads=2, d_ff=16), layout_of(3)
    ).eval()
    x = torch.randn(2, 16, 3)
    observed = torch.rand(2, 16, 3) > 0.25
    other = torch.where(observed, x, torch.randn_like(x) * 100)
    torch.testing.assert_close(model.predict(x, observed), model.predict(other, observed), rtol=0, atol=0)
    assert not torch.equal(model.predict(x, observed), model.predict(x))  # the mask is used


def test_naive_forecasters_repeat_the_last_observed_value():
    context = torch.tensor([[1.0, 2.0, 3.0, 4.0]]).unsqueeze(-1)  # (1, 4, 1)
    observed = torch.tensor([[False, True, True, False]]).unsqueeze(-1)
    assert forward_fill(context, observed)[0, :, 0].tolist() == [0.0, 2.0, 3.0, 3.0]


def test_metrics_leave_unobserved_truth_out():
    forecast, truth = np.zeros((1, 2, 1)), np.array([[[1.0], [100.0]]])
    observed = np.array([[[True], [False]]])
    scores = score(forecast, truth, np.zeros((1, 1)), np.ones((1, 1)), ("a",), np.ones((1, 1)), observed)
    assert scores["mean"]["mse"] == 1.0 and scores["mean"]["mae"] == 1.0


def test_a_series_without_one_value_is_refused_by_name_unless_missing_means_zero(tmp_path):
    stamps = pd.date_range("2024-01-01", periods=40, freq="D").strftime("%Y-%m-%d")
    frame = pd.concat(
        [pd.DataFrame({"unique_id": uid, "ds": stamps, "y": np.arange(40.0) + k}) for k, uid in enumerate("ABC")]
    )
    frame.loc[frame.unique_id == "B", "y"] = np.nan
    csv = write_csv(tmp_path / "panel.csv", frame)
    with pytest.raises(DataError, match=r"series 'B' has no value at all: nothing to forecast it from"):
        training_data(tiny_config(csv))
    with pytest.raises(DataError, match=r"series 'B' has no value at all"):
        require_values(read_series(csv, DataConfig()), fill="")
    require_values(read_series(csv, DataConfig(fill="zero")), fill="zero")  # missing means zero, as asked
    frame["z"] = 1.0  # B has values in another target: it is scaled with every series' statistics instead
    require_values(read_series(write_csv(tmp_path / "two.csv", frame), DataConfig(targets=("y", "z"))), fill="")
