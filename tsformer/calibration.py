"""After training, on the validation windows only: the fallback choice and the conformal calibration.

The trained model and the naive forecasters are scored on the validation windows; each column of each
series keeps the best (`tsformer.fallback`). The intervals and quantile pairs are then calibrated on the
errors there of the forecast chosen on the other half of each series' validation origins (cross-fitted,
`_cross_fitted`; `tsformer.intervals`). With the final fit (`tsformer.final`) predict forecasts from where
its model's training ends, as each validation window does from the held-out model's, so validation errors
are measured at predict's distance (a calibration model trained a stretch earlier is no longer needed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from tsformer.data import Prepared, Split, WindowIndex
from tsformer.fallback import Decision, apply, decide
from tsformer.intervals import (
    SCALE_FLOOR,
    Calibration,
    calibrate,
    calibrate_quantiles,
    calibration_scale,
    context_change,
    error_counts,
    errors_needed,
    quantile_pairs,
    typical_scale,
)

if TYPE_CHECKING:
    from tsformer.predictor import Predictor


def choose_and_calibrate(
    predictor: Predictor,
    val_windows: WindowIndex,
    data: Prepared,
    model_outputs: tuple[torch.Tensor, torch.Tensor | None] | None = None,
) -> tuple[Predictor, Decision]:
    """The predictor with its fallback chosen and its intervals and quantile pairs calibrated on the validation
    windows (cross-fitted around the chosen forecasters), and the decision. `model_outputs`: the model's
    forecasts of those windows already made (training's best epoch), else they are made here."""
    cfg = data.config
    windows = val_windows.split(cfg.model.context_len)
    ids = val_windows.series()  # (N,) each window's series
    forecasts = predictor.forecasters(windows, model_outputs)
    decision = decide(
        forecasts[0],
        windows.target,
        windows.target_observed,
        data.layout.targets,
        cfg.train.fallback,
        ids,
        data.frame.n_ids,
        cfg.train.selection_metric,
    )
    chosen = predictor.replace(fallback=decision.choice, calibration=None)
    point, quantiles = _cross_fitted(forecasts, windows, ids, decision, data)  # whose errors calibrate
    season = predictor.season
    n_errors = error_counts(windows.target_observed, tuple(windows.target.shape))
    levels = tuple(level for level in cfg.train.intervals if errors_needed(level) <= n_errors)
    unsupported = tuple((level, errors_needed(level)) for level in cfg.train.intervals if level not in levels)
    scale, typical = calibration_scale(cfg.train.interval_scale, windows.context, windows.context_observed, season)
    if scale is not None:  # no half-width below a tenth of its window's scale
        floor = SCALE_FLOOR
    else:  # fixed widths: none below a tenth of the typical validation window's seasonal change
        floor = SCALE_FLOOR * typical_scale(context_change(windows.context, windows.context_observed, season))
    widths = calibrate(point, windows.target, windows.target_observed, levels, scale, floor)
    adjust = None
    if quantiles is not None:
        pairs = quantile_pairs(cfg.train.quantiles)
        adjust = calibrate_quantiles(
            quantiles, windows.target, windows.target_observed, pairs, predictor.model.quantile_levels
        )
    calibration = Calibration(
        levels=levels,
        widths=widths,
        typical=typical if levels else None,
        season=season,
        quantile_adjust=adjust,
        n_errors=n_errors,
        unsupported=unsupported,
    )
    return chosen.replace(calibration=calibration), decision


def _cross_fitted(
    forecasts: tuple[dict[str, torch.Tensor], torch.Tensor | None],
    windows: Split,
    ids: np.ndarray,
    decision: Decision,
    data: Prepared,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The forecast (N, H, C) and quantiles (N, H, C, Q) or None whose errors calibrate: each validation window
    forecast by what its series and column chose on the other half of the series' validation origins (the
    earlier half's windows by the choice made on the later half, and back), so no error calibrates a choice it
    helped make; a choice made on the same windows ships its luckiest forecaster there, and its intervals would
    cover less than they state. A series with one validation window keeps the run's choice."""
    each, model_quantiles = forecasts
    n_ids, cfg = data.frame.n_ids, data.config
    counts = np.bincount(ids, minlength=n_ids)
    order = np.argsort(ids, kind="stable")  # series by series, each in time order
    rank = np.empty(len(ids), dtype=np.int64)
    rank[order] = np.arange(len(ids)) - np.repeat(np.cumsum(counts) - counts, counts)
    later = rank >= counts[ids] // 2  # (N,) the window is in its series' later half of origins

    def choice_on(half: np.ndarray) -> tuple[tuple[str, ...], ...]:
        columns, enabled, metric = data.layout.targets, cfg.train.fallback, cfg.train.selection_metric
        observed = windows.target_observed
        return decide(each, windows.target, observed, columns, enabled, ids, n_ids, metric, include=half).choice

    on_earlier, on_later = choice_on(~later), choice_on(later)
    one_window = counts < 2
    table = tuple(  # rows 0..n-1 for the earlier windows (chosen on the later), then n..2n-1 for the later ones
        run if alone else other
        for rows in (on_later, on_earlier)
        for run, other, alone in zip(decision.choice, rows, one_window, strict=True)
    )
    point = apply(table, each, ids + n_ids * later)
    quantiles = None if model_quantiles is None else model_quantiles + (point - each["model"]).unsqueeze(-1)
    return point, quantiles
