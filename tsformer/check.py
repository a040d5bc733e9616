"""`check_predictor`: every leakage check on a trained predictor and the data it reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tsformer.data import Prepared
from tsformer.leakage import CheckResult, check_calibration_model, check_data, check_intervals, check_model

if TYPE_CHECKING:
    from tsformer.predictor import Predictor


def check_predictor(predictor: Predictor, data: Prepared | None, n_checks: int = 32) -> list[CheckResult]:
    """The model checks on the assembled model, the intervals' checks on its calibration, and (with `data`, read
    by `Predictor.read`) the data checks: fills, the scaler, the windows and splits."""
    cfg, calibration = predictor.config.model, predictor.calibration

    def half_widths(windows):
        return None if calibration is None else calibration.half_widths(windows)

    results = check_model(predictor.model, n_checks=n_checks)
    results.append(check_intervals(half_widths, cfg.context_len, cfg.horizon, predictor.layout.n_targets))
    results.append(
        check_calibration_model(predictor.borders, None if calibration is None else calibration.refit_borders)
    )
    return results + ([] if data is None else check_data(data, predictor.config))
