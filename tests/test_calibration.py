"""tsformer.calibration: the fallback's choice and the conformal calibration, on the validation windows only."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import tiny_config

from tsformer.calibration import _cross_fitted
from tsformer.fallback import WindowErrors, apply, decide


def test_each_window_is_calibrated_by_the_choice_made_on_the_other_half_of_its_series_origins():
    """A candidate lucky on a series' earlier origins and poor on its later ones: the run keeps the model, but the
    later windows' calibration errors are the candidate's (chosen on the earlier half), as an unlucky choice's
    would be; the same-window errors would all be the model's."""
    truth = torch.zeros(4, 2, 1)
    candidate = torch.tensor([0.1, 0.1, 3.0, 3.0]).view(4, 1, 1).expand(4, 2, 1)
    each = {"model": truth + 1.0, "repeat_last": candidate}
    ids = np.zeros(4, dtype=np.int64)
    decision = decide(each, truth, None, ("y",), ids=ids, n_ids=1)
    assert decision.choice == (("model",),)
    data = SimpleNamespace(frame=SimpleNamespace(n_ids=1), config=tiny_config(), layout=SimpleNamespace(targets=("y",)))
    table, rows = _cross_fitted(WindowErrors.of(each, truth, None), ids, decision, data)
    point = apply(table, each, rows)
    assert point[:, 0, 0].tolist() == pytest.approx([1.0, 1.0, 3.0, 3.0])
