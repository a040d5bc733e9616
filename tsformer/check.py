"""`check_predictor`: every leakage check on a trained predictor and the data it reads."""

from __future__ import annotations

from pathlib import Path

from tsformer.checkpoint import load_predictor
from tsformer.data import Prepared
from tsformer.leakage import CheckResult, check_calibration_model, check_data, check_intervals, check_model
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


def check_run(run: str | Path, csv: str | Path | None = None, n_checks: int = 32) -> tuple[list[CheckResult], str]:
    """Every check on a saved run; the data checks on the run's CSV (or `csv`) when it can be read.

    Returns the results and a note on what was skipped ("" when nothing was).
    """
    predictor = load_predictor(run)
    path = Path(csv) if csv is not None else Path(predictor.config.data.path) if predictor.config.data.path else None
    if path is None or not path.is_file():
        where = f"{path} not found" if path is not None else "the run was trained on a DataFrame"
        return check_predictor(predictor, None, n_checks), f"data checks skipped: {where} (pass --csv to run them)"
    return check_predictor(predictor, predictor.read(path), n_checks), ""
