"""Rolling validation origins and the final fit on every row (tsformer.final): which model reads which rows."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import make_frame, tiny_config
from test_long_format import long_frame

from tsformer.api import fit
from tsformer.check import check_final
from tsformer.config import DataConfig
from tsformer.data import training_data
from tsformer.data.split import val_horizons
from tsformer.evaluate import evaluate
from tsformer.final import last_timestamps
from tsformer.predict import forecast_after
from tsformer.predictor import Predictor, load_predictor
from tsformer.train import train


def config(val_horizons: int | None = None, final_fit: bool = True, epochs: int = 2, fallback: bool = True):
    cfg = tiny_config(fallback=fallback)
    return dataclasses.replace(
        cfg,
        data=dataclasses.replace(cfg.data, val_horizons=val_horizons),
        train=dataclasses.replace(cfg.train, final_fit=final_fit, epochs=epochs),
    )


def test_long_format_validates_each_series_on_several_horizons_at_every_origin():
    data = training_data(config(), long_frame({"A": 200, "B": 160, "C": 120}))
    # auto: 3 horizons of 4 steps, as 4 x 4 steps leave the median series (160 rows) more than half its rows
    assert data.config.data.val_horizons == 3
    assert (data.borders.val_end - data.borders.train_end).tolist() == [12, 12, 12]
    counts = np.bincount(data.split_windows("val").series(), minlength=3)
    assert counts.tolist() == [9, 9, 9]  # every stride-1 origin of the 12 steps: 12 - 4 + 1
    assert any("the 12 before them validation (3 horizons: 9 forecast origins" in note for note in data.notes)


def test_short_series_keep_one_validation_horizon_and_a_stated_count_is_kept():
    lengths = np.array([30, 20, 20])  # the median series, 20 rows, keeps half of them with 1 horizon, not with 2
    assert [val_horizons(DataConfig(), lengths[:k], 4) for k in (1, 3)] == [2, 1]
    data = training_data(config(val_horizons=2), long_frame({"A": 200, "B": 160}))
    assert (data.borders.val_end - data.borders.train_end).tolist() == [8, 8]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    frame = long_frame({"A": 160, "B": 140, "C": 120})
    folder = tmp_path_factory.mktemp("final") / "run"
    predictor = train(config(fallback=False), folder, show_progress=False, source=frame)  # the model ships
    return frame, predictor, folder


def test_predict_forecasts_with_the_final_model_and_evaluate_scores_the_held_out_one(run):
    frame, predictor, folder = run
    final = predictor.final
    assert final is not None and final.n_windows > predictor.summary.n_train_windows  # validation and test too
    assert final.steps == predictor.summary.best_epoch * -(-final.n_windows // 32)  # its epochs over every row
    data = predictor.read()
    assert np.array_equal(final.until, last_timestamps(data.frame))
    weights = [p.detach() for p in final.model.parameters()]
    assert any((a != b).any() for a, b in zip(weights, predictor.model.parameters(), strict=True))
    forecast = forecast_after(predictor, data.frame).frame
    as_final = forecast_after(predictor.replace(model=final.model, final=None), data.frame).frame
    as_held_out = forecast_after(predictor.replace(final=None), data.frame).frame
    assert forecast.equals(as_final) and not forecast.equals(as_held_out)
    # evaluate: the held-out model's forecast of the test windows, whatever the final model says
    report = evaluate(predictor, data)
    assert report.scores == evaluate(predictor.replace(final=None), data).scores
    loaded = load_predictor(folder)
    assert loaded.final is not None and loaded.final.steps == final.steps
    for a, b in zip(loaded.final.model.parameters(), final.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert forecast_after(loaded, data.frame).frame.equals(forecast)
    assert check_final(predictor, data).passed


def test_data_ending_before_the_final_models_rows_are_forecast_by_the_held_out_model(run):
    frame, predictor, _ = run
    shorter = frame.groupby("unique_id", sort=False).head(-5)  # every series 5 steps short of what it trained on
    forecast = forecast_after(predictor, shorter)
    held_out = forecast_after(predictor.replace(final=None), shorter)
    assert forecast.frame.equals(held_out.frame)
    assert any("end before the rows the final model trained on" in note for note in forecast.notes)


def test_blank_rows_at_the_end_of_the_training_data_leave_predict_on_the_final_model(tmp_path):
    frame = long_frame({"A": 160, "B": 140})
    last = frame.groupby("unique_id", sort=False).tail(1)
    blank = pd.concat(  # 3 hours a series with no value yet, as rows of covariates to come
        [last.assign(ds=(pd.to_datetime(last["ds"]) + pd.Timedelta(hours=k)).astype(str), y=np.nan) for k in (1, 2, 3)]
    )
    predictor = train(config(fallback=False), tmp_path / "run", show_progress=False, source=pd.concat([frame, blank]))
    data = predictor.read()
    assert np.array_equal(predictor.final.until, last_timestamps(training_data(config(), frame).frame))
    forecast = forecast_after(predictor, data.frame)  # the data it trained on, blank rows included
    assert not any("end before the rows the final model trained on" in note for note in forecast.notes)
    as_final = forecast_after(predictor.replace(model=predictor.final.model, final=None), frame).frame
    assert forecast.frame.equals(as_final)
    assert check_final(predictor, data).passed


def test_check_fails_when_the_scoring_path_uses_the_final_model(run, monkeypatch):
    _, predictor, _ = run
    data = predictor.read()
    original = Predictor.forecast

    def leaky(self, windows, ids, window_scaler=None):  # a deliberate break: evaluate scoring the final model
        swapped = self.replace(model=self.final.model) if self.final is not None else self
        return original(swapped, windows, ids, window_scaler)

    monkeypatch.setattr(Predictor, "forecast", leaky)
    result = check_final(predictor, data)
    assert not result.passed and result.max_change > 0


def test_test_rows_replaced_by_noise_change_no_choice_only_the_final_model():
    frame = long_frame({"A": 160, "B": 140, "C": 120})
    noisy = frame.copy()
    rng = np.random.default_rng(1)
    test_rows = noisy.groupby("unique_id", sort=False).cumcount(ascending=False) < 4  # each series' last 4 (test)
    noisy.loc[test_rows, "y"] = rng.normal(size=int(test_rows.sum())) * 100
    holed = noisy.copy()
    holed.loc[np.flatnonzero(test_rows)[2], "y"] = np.nan  # and a cell missing among them (masks take another path)
    first = fit(frame, horizon=4, config=config())
    for other in (fit(noisy, horizon=4, config=config()), fit(holed, horizon=4, config=config())):
        for a, b in zip(first.model.parameters(), other.model.parameters(), strict=True):
            assert torch.equal(a, b)  # the held-out model, and every choice made with it
        assert first.fallback == other.fallback and first.config == other.config
        assert torch.equal(first.calibration.widths, other.calibration.widths)
        assert first.summary.lines[:-1] == other.summary.lines[:-1]
        final_a, final_b = first.final.model.parameters(), other.final.model.parameters()
        assert any(not torch.equal(a, b) for a, b in zip(final_a, final_b, strict=True))  # it is meant to read them


def test_predict_from_a_cut_history_matches_the_backtest_path_and_fails_when_it_keeps_the_final_model(run, monkeypatch):
    from tsformer.check import check_predict_origins

    _, predictor, _ = run
    data = predictor.read()
    result = check_predict_origins(predictor, data)
    assert result.passed and result.max_change < 1e-4, result
    assert result.detail.endswith(f"{data.frame.n_ids} series")

    def always_final(self, frame):  # a deliberate break: a history cut before the final model's rows gets it
        return (self.replace(model=self.final.model, final=None), "")

    monkeypatch.setattr(Predictor, "for_origins", always_final)
    broken = check_predict_origins(predictor, data)
    assert not broken.passed and broken.max_change > 1e-3


def test_check_compares_the_held_out_model_at_the_datas_floor(tmp_path):
    """Counts floored at zero: evaluate scores the model's forecast at the floor, and check_final compares the
    held-out model's own output at the same floor (it compared it raw, and failed where the model went negative)."""
    counts = long_frame({"A": 160, "B": 140, "C": 120}).assign(
        y=lambda f: np.random.default_rng(1).poisson(0.3, len(f)).astype(float)
    )
    cfg = config(fallback=False)
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, floor="zero"))
    predictor = train(cfg, None, show_progress=False, source=counts)
    data = predictor.read()
    cut = data.split_windows("test").split(predictor.context_len)
    raw = torch.cat(list(predictor.model.predict_batches(cut.context, cut.context_observed, cut.covariates)))
    assert (raw < predictor.floors(data.split_windows("test").series())).any()  # the floor binds somewhere
    assert check_final(predictor, data).passed


def test_a_cell_missing_in_the_test_rows_leaves_the_held_out_model_bit_for_bit():
    """Whether windows carry an observed mask (another path through attention and the loss) is decided by their
    own cells: a cell missing in the test rows does not move the training of three members."""
    frame = make_frame(240)
    holed = frame.copy()
    holed.loc[230, "a"] = np.nan  # a test row
    cfg = config(final_fit=False)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, members=3))
    first, second = (
        train(cfg, None, show_progress=False, source=frame),
        train(cfg, None, show_progress=False, source=holed),
    )
    for a, b in zip(first.model.parameters(), second.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert first.fallback == second.fallback and torch.equal(first.calibration.widths, second.calibration.widths)
