"""tsformer.calibration.calibration_plan: how train.interval_calibration=auto is resolved, before training."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import make_frame, tiny_config
from test_long_format import long_frame

from tsformer.calibration import calibration_plan
from tsformer.data import training_data
from tsformer.errors import ConfigError


def planned(table, calibration: str = "auto", intervals: tuple[float, ...] = (0.8, 0.95), **data):
    cfg = tiny_config()
    train = dataclasses.replace(cfg.train, interval_calibration=calibration, intervals=intervals)
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, **data), train=train)
    return calibration_plan(training_data(cfg, table))


def test_a_panel_with_one_validation_window_per_series_gets_a_calibration_model():
    data, calibration_cfg = planned(long_frame({"A": 120, "B": 96, "C": 150}))
    assert data.config.train.interval_calibration == "refit"
    assert data.notes[-1].startswith("intervals: calibrated by a second model trained one validation + test")
    # each series' split moved back by its validation + test stretch (2 x horizon 4), from its end
    assert calibration_cfg.data.split_borders == (-16, -12, -4)
    assert calibration_cfg.train.interval_calibration == "validation"


def test_a_wide_file_with_many_validation_windows_keeps_its_own():
    data, calibration_cfg = planned(make_frame())
    assert (data.config.train.interval_calibration, calibration_cfg) == ("validation", None)
    assert not any(note.startswith("intervals:") for note in data.notes)


def test_no_intervals_need_no_calibration_model():
    data, calibration_cfg = planned(long_frame({"A": 120, "B": 96}), intervals=())
    assert (data.config.train.interval_calibration, calibration_cfg) == ("validation", None)


def test_auto_falls_back_when_the_earlier_split_has_no_room_and_refit_is_refused():
    short = long_frame({"A": 20, "B": 20})  # 12 training rows: the calibration model's 4 hold no window
    data, calibration_cfg = planned(short)
    assert (data.config.train.interval_calibration, calibration_cfg) == ("validation", None)
    assert data.notes[-1].startswith("intervals: calibrated on the validation windows, as a calibration model does not")
    with pytest.raises(ConfigError, match="train.interval_calibration=refit moves the split back by 8 steps"):
        planned(short, calibration="refit")


def test_explicit_choices_are_kept():
    data, calibration_cfg = planned(long_frame({"A": 120, "B": 96}), calibration="validation")
    assert (data.config.train.interval_calibration, calibration_cfg) == ("validation", None)
    data, calibration_cfg = planned(make_frame(), calibration="refit")
    assert data.config.train.interval_calibration == "refit" and calibration_cfg is not None
