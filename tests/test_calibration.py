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


def test_each_window_is_calibrated_by_the_choice_made_on_the_other_half_of_its_series_origins():
    """A candidate lucky on a series' earlier origins and poor on its later ones: the run keeps the model, but the
    later windows' calibration errors are the candidate's (chosen on the earlier half), as an unlucky choice's
    would be; the same-window errors would all be the model's."""
    from types import SimpleNamespace

    import numpy as np
    import torch

    from tsformer.calibration import _cross_fitted
    from tsformer.data import Split
    from tsformer.fallback import decide

    truth = torch.zeros(4, 2, 1)
    candidate = torch.tensor([0.1, 0.1, 3.0, 3.0]).view(4, 1, 1).expand(4, 2, 1)
    each = {"model": truth + 1.0, "repeat_last": candidate}
    ids = np.zeros(4, dtype=np.int64)
    decision = decide(each, truth, None, ("y",), ids=ids, n_ids=1)
    assert decision.choice == (("model",),)
    data = SimpleNamespace(
        frame=SimpleNamespace(n_ids=1), config=tiny_config(), layout=SimpleNamespace(targets=("y",))
    )
    windows = Split(torch.zeros(4, 3, 1), truth, None, None, None)
    point, quantiles = _cross_fitted((each, None), windows, ids, decision, data)
    assert point[:, 0, 0].tolist() == pytest.approx([1.0, 1.0, 3.0, 3.0]) and quantiles is None
