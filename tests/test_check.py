"""tsformer.check: the checks on a trained predictor that need it whole (its forecasters, its two models)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from helpers import make_frame, tiny_config

from tsformer.candidates import candidate_forecasts
from tsformer.check import (
    check_choices,
    check_epoch,
    check_forecasters,
    check_predictor,
    check_scales,
    check_settings,
    check_train_windows,
)
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


def test_choices_made_by_a_rule_that_reads_the_test_rows_are_caught(monkeypatch):
    """A deliberate break inside the choosing itself (the check calls the same function, so recomputing on the
    same rows would repeat the leak): the fallback and intervals chosen on the test windows whatever they are
    given."""
    import tsformer.calibration as calibration
    import tsformer.check as check
    import tsformer.train as training

    honest = calibration.choose_and_calibrate

    def on_test(predictor, val_windows, data, model_outputs=None):
        return honest(predictor, data.split_windows("test"), data)

    monkeypatch.setattr(training, "choose_and_calibrate", on_test)
    monkeypatch.setattr(check, "choose_and_calibrate", on_test)
    leaky = train(tiny_config(), show_progress=False, source=make_frame(240))
    result = check_choices(leaky, leaky.read())
    assert not result.passed, result.detail


def test_an_epoch_chosen_on_the_test_windows_is_caught(predictor, monkeypatch):
    """The held-out model's validation score is the best one training recorded; a run whose epochs were scored
    on the test windows (a deliberate break) recorded a test score."""
    import tsformer.train as training

    result = check_epoch(predictor, predictor.read())
    assert result.passed and "(epoch " in result.detail, result.detail
    honest = training._Runner._val_loss

    def on_test(self, val_windows):
        score = honest(self, self.data.split_windows("test"))
        honest(self, val_windows)  # the validation forecasts kept for the choices, as a run keeps them
        return score

    with monkeypatch.context() as patched:
        patched.setattr(training._Runner, "_val_loss", on_test)
        leaky = train(tiny_config(), show_progress=False, source=make_frame(240))
    result = check_epoch(leaky, leaky.read())
    assert not result.passed and result.max_change > 1e-3, result.detail
    assert check_epoch(predictor.replace(given=None), predictor.read()).skipped  # a score defined otherwise


def test_a_model_trained_on_windows_past_the_training_end_is_caught(predictor, monkeypatch):
    """A held-out model trained on every window through validation (a deliberate break: the training split's
    windows taken with validation's end) chose its epoch, fallback and intervals on rows it trained on."""
    import tsformer.train as training
    from tsformer.data import Prepared

    result = check_train_windows(predictor, predictor.read())
    assert result.passed and "(149) against those of the training split (149)" in result.detail, result.detail
    honest = Prepared.split_windows

    def through_validation(self, split, stride=1):
        if split != "train":
            return honest(self, split, stride)
        wider = dataclasses.replace(self.borders, train_end=self.borders.val_end)
        return honest(dataclasses.replace(self, borders=wider), split, stride)

    with monkeypatch.context() as patched:  # training's windows taken from another Prepared than the one checked
        patched.setattr(Prepared, "split_windows", through_validation)
        patched.setattr(training, "_run_leakage_checks", lambda model, data, cfg: None)
        leaky = train(tiny_config(), show_progress=False, source=make_frame(240))
    result = check_train_windows(leaky, leaky.read())
    assert not result.passed and "recorded (173) against those of the training split (149)" in result.detail


def test_score_scales_read_from_the_test_rows_are_caught(predictor, monkeypatch):
    """MASE denominators from every row of a series (a deliberate break) move with its test rows."""
    from tsformer.data import Prepared
    from tsformer.metrics import mase_scale

    assert check_scales(predictor, predictor.read()).passed

    def every_row(self, season, split="test"):
        return np.stack([mase_scale(self.frame.values[self.frame.rows_of(i)], season) for i in range(self.frame.n_ids)])

    monkeypatch.setattr(Prepared, "mase_scales", every_row)
    result = check_scales(predictor, predictor.read())
    assert not result.passed and result.max_change > 1.0, result.detail


def test_an_automatic_setting_read_from_the_test_rows_is_caught(monkeypatch):
    """The settings left automatic chosen again with every value after validation redrawn; a rule that reads the
    last row (a deliberate break) chooses otherwise."""
    import dataclasses

    import tsformer.data.choices as choices

    cfg = tiny_config()
    predictor = train(dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, calendar=None)), None,
                      show_progress=False, source=make_frame(240))  # fmt: skip
    assert predictor.given.data.calendar is None and predictor.config.data.calendar is not None
    data = predictor.read()
    result = check_settings(predictor, data)
    assert result.passed and result.detail.endswith("the same choices"), result.detail
    honest = choices._choose_calendar

    def peeking(frame, borders):
        calendar, why = honest(frame, borders)
        return bool(np.abs(frame.values[-1]).max() > 100.0), why  # the file's last row decides

    monkeypatch.setattr(choices, "_choose_calendar", peeking)
    result = check_settings(predictor, data)
    assert not result.passed and "data.calendar False -> True" in result.detail, result.detail
    old = predictor.replace(given=None)  # saved before the given config was kept: every setting made automatic
    assert not check_settings(old, data).passed
    monkeypatch.setattr(choices, "_choose_calendar", honest)
    assert check_settings(old, data).passed
    from tsformer.errors import DataError

    def refusing(cfg, frame):
        raise DataError("too few rows for the automatic context")

    monkeypatch.setattr(choices, "resolve_from_data", refusing)  # a rule the user's own setting got round
    skipped = check_settings(old, data)
    assert skipped.skipped and "too few rows" in skipped.detail


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
