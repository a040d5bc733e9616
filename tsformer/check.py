"""`check_predictor`: every leakage check on a trained predictor and the data it reads."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np
import torch

from tsformer.data import Prepared
from tsformer.final import last_timestamps
from tsformer.leakage import CheckResult, check_data, check_intervals, check_model

if TYPE_CHECKING:
    from tsformer.predictor import Predictor


def check_predictor(predictor: Predictor, data: Prepared | None) -> list[CheckResult]:
    """The model checks on the assembled model, the intervals' checks on its calibration, and (with `data`, read
    by `Predictor.read`) the data checks: fills, the scaler, the windows and splits."""
    cfg, calibration = predictor.config.model, predictor.calibration

    def half_widths(windows):
        return None if calibration is None else calibration.half_widths(windows)

    results = check_model(predictor.model)
    results.append(check_intervals(half_widths, cfg.context_len, cfg.horizon, predictor.layout.n_targets))
    results.append(check_forecasters(predictor, data))
    results.append(check_final(predictor, data))
    return results + ([] if data is None else check_data(data, predictor.config))


PROBE_WINDOWS = 8  # windows each probe forecasts (ETS and Theta fit every one: keep it cheap)


def check_forecasters(predictor: Predictor, data: Prepared | None) -> CheckResult:
    """Every forecaster the fallback may ship (the model and each classical candidate) forecasts validation
    windows through the path that scores and ships them (`Predictor.forecasters`) exactly as before after every
    target after the origin is redrawn with large random values: none reads a row after its origin."""
    if data is None:
        return CheckResult("forecasters/future", True, 0.0, "data checks skipped: no windows to probe")
    windows = data.split_windows("val")
    if not len(windows):
        return CheckResult("forecasters/future", True, 0.0, "no validation window to probe")
    picked = windows.subset(torch.linspace(0, len(windows) - 1, min(PROBE_WINDOWS, len(windows))).long()).all()
    context_len = predictor.context_len
    generator = torch.Generator().manual_seed(0)
    redrawn = picked.target.clone()
    redrawn[:, context_len:] = 1e3 * torch.randn(redrawn[:, context_len:].shape, generator=generator)
    before, _ = predictor.forecasters(picked.split(context_len))
    after, _ = predictor.forecasters(dataclasses.replace(picked, target=redrawn).split(context_len))
    change = {name: float((after[name] - before[name]).abs().max()) for name in before}
    worst = max(change.values())
    moved = [name for name, value in change.items() if value > 0]
    return CheckResult(
        "forecasters/future",
        worst == 0.0,
        worst,
        f"forecasts of {len(picked)} validation windows by the model and {len(before) - 1} candidates after "
        f"redrawing every target after the origin{': ' + ', '.join(moved) + ' moved' if moved else ''}",
    )


def check_final(predictor: Predictor, data: Prepared | None) -> CheckResult:
    """Which model read which rows: the held-out model scores (evaluate and backtest forecast test windows with
    it, never with the final model, which trained on them), and the final model read exactly the rows of each
    series up to its end (so predict's origins lie after them). Without `data` only the first can be said."""
    final = predictor.final
    if final is None:
        return CheckResult("final/rows", True, 0.0, "no final model: every command uses the held-out model")
    if data is None:
        return CheckResult("final/rows", True, 0.0, "final model present; data checks skipped, so its rows unproven")
    windows = data.split_windows("test")
    if not len(windows):
        return CheckResult("final/rows", False, float("inf"), "no test window to probe the scoring path on")
    picked = windows.subset(torch.linspace(0, len(windows) - 1, min(PROBE_WINDOWS, len(windows))).long())
    cut, ids = picked.split(predictor.context_len), picked.series()
    scored = predictor.forecast(cut, ids).each["model"]  # what evaluate and backtest score

    def own(model) -> torch.Tensor:
        return torch.cat(list(model.predict_batches(cut.context, cut.context_observed, cut.covariates))).cpu()

    change = float((scored - own(predictor.model)).abs().max())
    distinct = bool((own(final.model) - own(predictor.model)).abs().max() > 0)
    until_ok = bool(np.array_equal(final.until, last_timestamps(data.frame)))
    predicts_final = predictor.for_origins(data.frame)[0].model is final.model
    passed = change == 0.0 and distinct and until_ok and predicts_final
    return CheckResult(
        "final/rows",
        passed,
        change,
        f"test windows scored by the held-out model ({len(ids)} probed; the final model forecasts them "
        f"{'differently' if distinct else 'IDENTICALLY'}); the final model read each series to its "
        f"{'last row' if until_ok else 'rows NOT matching this data'}; predict "
        f"{'uses it' if predicts_final else 'does NOT use it'}",
    )
