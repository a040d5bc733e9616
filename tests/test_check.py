"""tsformer.check: the checks on a trained predictor that need it whole (its forecasters, its two models)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_frame, tiny_config

from tsformer.candidates import candidate_forecasts
from tsformer.check import check_choices, check_forecasters, check_predictor
from tsformer.predictor import Predictor
from tsformer.train import train


@pytest.fixture(scope="module")
def predictor():
    return train(tiny_config(), show_progress=False, source=make_frame(240))


def test_every_forecaster_reads_only_rows_before_its_origin(predictor):
    result = check_forecasters(predictor, predictor.read())
    assert result.passed and result.max_change == 0.0
    assert "by the model and 4 candidates" in result.detail  # hourly data, a 16-step context: no weekly ones


def test_a_candidate_reading_the_next_row_is_caught(predictor, monkeypatch):
    original = Predictor.forecasters

    def peeking(self, windows, floor=None, model_outputs=None, reference=False):  # a deliberate break: repeat-last
        each, quantiles = original(self, windows, floor, model_outputs, reference)  # reads the next step
        shifted = torch.cat([windows.context[:, 1:], windows.target[:, :1]], dim=1)
        each["repeat_last"] = candidate_forecasts(shifted, None, self.horizon, self.season)["repeat_last"]
        return each, quantiles

    monkeypatch.setattr(Predictor, "forecasters", peeking)
    result = check_forecasters(predictor, predictor.read())
    assert not result.passed and result.max_change > 1.0 and "repeat_last moved" in result.detail
    assert any(r.name == "forecasters/future" and not r.passed for r in check_predictor(predictor, predictor.read()))


def test_the_stored_choices_are_those_the_validation_windows_give(predictor):
    result = check_choices(predictor, predictor.read())
    assert result.passed and result.max_change == 0.0, result.detail


def test_intervals_recalibrated_elsewhere_or_a_changed_fallback_are_caught(predictor):
    """A deliberate break: the intervals recalibrated on the test windows and written into the run (as a checkpoint
    edited after training would hold them), or one column's forecaster switched."""
    import dataclasses

    from tsformer.intervals import calibrate

    data = predictor.read()
    test = data.split_windows("test").split(predictor.context_len)
    shipped = predictor.forecast(test, data.split_windows("test").series())
    calibration = predictor.calibration
    widths = calibrate(shipped.point, test.target, test.target_observed, calibration.levels, None, 0.0)
    on_test = predictor.replace(calibration=dataclasses.replace(calibration, widths=widths))
    assert not check_choices(on_test, data).passed
    assert check_choices(predictor, data).passed
    fallback = predictor.fallback
    moved = fallback.values.copy()
    moved[0, 0] = np.roll(moved[0, 0], 1)  # one column's weights on other forecasters
    result = check_choices(predictor.replace(fallback=dataclasses.replace(fallback, values=moved)), data)
    assert not result.passed and "DIFFERENT" in result.detail


def test_the_backtest_path_reads_nothing_from_its_origin_on(predictor, monkeypatch):
    import dataclasses

    from tsformer.check import check_backtest_origins
    from tsformer.data import WindowIndex

    result = check_backtest_origins(predictor, predictor.read())
    assert result.passed and result.max_change == 0.0 and "forecast" in result.detail
    gather_all = WindowIndex.all

    def a_row_late(self):  # a deliberate break: every window's context reaches its first target row
        return gather_all(dataclasses.replace(self, starts=self.starts + 1))

    monkeypatch.setattr(WindowIndex, "all", a_row_late)
    result = check_backtest_origins(predictor, predictor.read())
    assert not result.passed and result.max_change > 1.0


def test_check_run_reports_each_result_as_it_is_made_on_the_runs_threads(tmp_path):
    from helpers import write_csv

    from tsformer.runs import check_run

    csv = write_csv(tmp_path / "data.csv", make_frame(240))
    train(tiny_config(csv), tmp_path / "run", show_progress=False)  # train.num_threads=1
    threads = torch.get_num_threads()
    heard = []

    def report(result):
        heard.append((result.name, torch.get_num_threads()))

    try:
        torch.set_num_threads(2)
        results, note = check_run(tmp_path / "run", report=report)
    finally:
        torch.set_num_threads(threads)
    assert note == "" and [name for name, _ in heard] == [r.name for r in results]
    assert "choices/validation" in dict(heard) and "data/splits" in dict(heard)
    assert {n for _, n in heard} == {1}  # the run's train.num_threads, not the process's 2
