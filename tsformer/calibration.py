"""After training, on the validation windows only: the linear candidate's rows, the fallback choice and the
conformal calibration.

The linear candidate (`tsformer.model.linear_candidate`) is fitted on the training windows, on every token's rows
and on the last token's where train.linear_rows is auto, and the fit with the lower validation score is kept; its
ridge is chosen on the training windows (`fit_linear`).

The trained model and the naive forecasters are scored on the validation windows; each column of each series
gets their weights by the run's rule (`tsformer.fallback`). The intervals and the quantiles are then
calibrated on the errors there of the forecast weighted on the other half of each series' validation origins
(cross-fitted, `_cross_fitted`; `tsformer.intervals`). With the final fit (`tsformer.final`) predict forecasts
from where its model's training ends, as each validation window does from the held-out model's, so validation
errors are measured at predict's distance (a calibration model trained a stretch earlier is no longer needed).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from tsformer.candidates import repeats
from tsformer.config import Config
from tsformer.data import Prepared, Split, WindowIndex
from tsformer.fallback import (
    Decision,
    Weights,
    WindowErrors,
    apply,
    choose,
    late_origins,
    model_weight,
    origin_ranks,
)
from tsformer.intervals import (
    CHUNK_WINDOWS,
    SCALE_FLOOR,
    Calibration,
    calibrate,
    calibrate_quantiles,
    calibration_scale,
    context_change,
    error_counts,
    errors_needed,
    typical_scale,
)
from tsformer.model import ForecasterBase, linear_candidate
from tsformer.search import ValidationTargets

if TYPE_CHECKING:
    from tsformer.predictor import Predictor


@dataclass(frozen=True)
class LinearFit:
    """The linear candidate as fitted, the rows and ridge it was fitted with, and each kind of rows' validation
    score where they were compared."""

    model: ForecasterBase
    rows: str  # one of linear_candidate.ROWS
    ridge: float
    scores: dict[str, float]  # rows -> the validation score of the fit on them; {} where train.linear_rows was given
    # ridge -> its MSE on the held training windows (`linear_candidate.choose_ridge`); {} where it was not chosen so
    ridge_scores: dict[float, float]


def fit_linear(cfg: Config, data: Prepared, model: ForecasterBase) -> LinearFit | None:
    """The linear candidate of `model` fitted on `data`'s training windows where train.candidates and the fallback
    ask for one and the model has one (else None), on train.linear_rows with train.linear_ridge.

    An automatic ridge is chosen on the training windows alone (`linear_candidate.choose_ridge`: each series'
    last fifth forecast by a fit of the earlier ones), as ETS picks its form in-sample, so that validation, which
    weighs the candidate against the others, has not picked it too (benchmarks/NOTES.md, session 41). With
    automatic rows each kind is fitted so and the fit with the lower validation score (what chose the epoch)
    kept, ROWS order on a tie: every token's rows where the series are short, the last token's where windows are
    many (session 40)."""
    train = cfg.train
    if not (train.fallback and "linear" in train.candidates and linear_candidate.applies(model)):
        return None
    train_windows = data.split_windows("train", train.train_stride)
    fits = {}
    choosing = train.linear_ridge is None
    for rows in linear_candidate.ROWS if train.linear_rows == "auto" else (train.linear_rows,):
        equations = linear_candidate.normal_equations(model, train_windows, train.seed, rows, choosing)
        ridge, ridge_scores = linear_candidate.choose_ridge(equations) if choosing else (train.linear_ridge, {})
        fits[rows] = LinearFit(linear_candidate.solve(model, equations, ridge), rows, ridge, {}, ridge_scores)
    if len(fits) == 1:
        return next(iter(fits.values()))
    val = data.split_windows("val")
    windows = val.split(cfg.model.context_len)
    targets = ValidationTargets.of_windows(val, windows)
    scores = {}
    for rows, fitted in fits.items():
        point = fitted.model.predict_batches(windows.context, windows.context_observed, windows.covariates)
        scores[rows] = targets.score(torch.cat(list(point)).cpu())
    chosen = fits[min(fits, key=scores.__getitem__)]
    return dataclasses.replace(chosen, scores=scores)


def choose_and_calibrate(
    predictor: Predictor,
    val_windows: WindowIndex,
    data: Prepared,
    model_outputs: tuple[torch.Tensor, torch.Tensor | None] | None = None,
) -> tuple[Predictor, Decision]:
    """The predictor with its fallback chosen and its intervals and quantiles calibrated on the validation
    windows (cross-fitted around the chosen forecasters), and the decision. `model_outputs`: the model's
    forecasts of those windows already made (training's best epoch), else they are made here.

    The candidates forecast CHUNK_WINDOWS windows at a time, twice (for the errors the choices rest on, then
    for the cross-fitted forecast that calibrates), so only the model's forecasts of every window are held."""
    cfg = data.config
    windows = val_windows.split(cfg.model.context_len)
    ids = val_windows.series()  # (N,) each window's series
    model_point, model_quantiles = model_outputs or predictor.model_outputs(windows)
    floor = predictor.floors(ids)  # (N, 1, C): what ships is floored, so the choices and widths see it floored
    model_point = torch.maximum(model_point, floor)
    model_quantiles = None if model_quantiles is None else torch.maximum(model_quantiles, floor.unsqueeze(-1))
    blocks = [slice(start, start + CHUNK_WINDOWS) for start in range(0, len(ids), CHUNK_WINDOWS)] or [slice(0, 0)]
    kept: dict[int, dict[str, torch.Tensor]] = {}  # one block: its forecasts, not made twice (ETS is slow)
    repeated = repeats(predictor.season)  # candidates that repeat others (at season 1): weighed once

    def each_of(i: int) -> dict[str, torch.Tensor]:
        if i in kept:
            return kept[i]
        block = blocks[i]
        each, _ = predictor.forecasters(_rows(windows, block), floor[block], (model_point[block], None))
        each = {name: forecast for name, forecast in each.items() if repeated.get(name) not in each}
        if len(blocks) == 1:
            kept[i] = each
        return each

    observed = windows.target_observed
    columns, enabled, n_ids = data.layout.targets, cfg.train.fallback, data.frame.n_ids
    late = late_origins(ids, n_ids)  # where the rule is scored
    metric = cfg.train.selection_metric
    errors = WindowErrors.concat(
        [
            WindowErrors.of(
                each_of(i), windows.target[b], None if observed is None else observed[b], metric, ids[b], late[b], n_ids
            )
            for i, b in enumerate(blocks)
        ]
    )
    decision = choose(errors, columns, enabled, ids, n_ids, metric)
    chosen = predictor.replace(fallback=decision.weights, calibration=None)
    table, rows = _cross_fitted(errors, ids, decision, data)  # whose errors calibrate
    point = torch.cat([apply(table, each_of(i), rows[b]) for i, b in enumerate(blocks)])
    season = predictor.season
    n_errors = error_counts(windows.target_observed, tuple(windows.target.shape))
    levels = tuple(level for level in cfg.train.intervals if errors_needed(level) <= n_errors)
    unsupported = tuple((level, errors_needed(level)) for level in cfg.train.intervals if level not in levels)
    scale, typical = calibration_scale(cfg.train.interval_scale, windows.context, windows.context_observed, season)
    adjust, per_scale = None, scale is not None and bool(levels)  # quantile shifts in the widths' units, where kept
    if model_quantiles is not None:  # grouped by what ships for each window's series, around its cross-fitted point
        weight = model_weight(decision.weights, ids, len(point), point.shape[-1])  # (N, C)
        offsets = model_quantiles - model_point.unsqueeze(-1)  # (N, H, C, Q)
        targets, observed_targets = windows.target, windows.target_observed
        adjust = calibrate_quantiles(
            point, offsets, weight, targets, observed_targets, predictor.model.quantile_levels,
            scale if per_scale else None,
        )  # fmt: skip
    if scale is not None:  # no half-width below a tenth of its window's scale
        floor = SCALE_FLOOR
    else:  # fixed widths: none below a tenth of the typical validation window's seasonal change
        floor = SCALE_FLOOR * typical_scale(context_change(windows.context, windows.context_observed, season))
    widths = calibrate(point, windows.target, windows.target_observed, levels, scale, floor)
    calibration = Calibration(
        levels=levels,
        widths=widths,
        typical=typical if levels else None,
        season=season,
        quantile_adjust=adjust,
        quantile_method="scaled" if per_scale else "groups",
        n_errors=n_errors,
        unsupported=unsupported,
    )
    return chosen.replace(calibration=calibration), decision


def _rows(windows: Split, block: slice) -> Split:
    """The windows of `block`, still views."""
    context, target, context_observed, target_observed, covariates = windows
    return Split(
        context[block],
        target[block],
        None if context_observed is None else context_observed[block],
        None if target_observed is None else target_observed[block],
        None if covariates is None else covariates.rows(block.start, block.stop, "cpu"),
    )


def _cross_fitted(
    errors: WindowErrors, ids: np.ndarray, decision: Decision, data: Prepared
) -> tuple[Weights, np.ndarray]:
    """Whose forecast each validation window's error calibrates, as weights and each window's row of them: its
    series and column's weights set on the other half of the series' validation origins by the run's rule (the
    earlier half's windows by the weights set on the later half, and back), so no error calibrates a choice it
    helped make; a choice made on the same windows ships its luckiest forecaster there, and its intervals would
    cover less than they state. A series with one validation window keeps the run's weights."""
    n_ids, cfg = data.frame.n_ids, data.config
    rank, counts = origin_ranks(ids, n_ids)
    later = rank >= counts[ids] // 2  # (N,) the window is in its series' later half of origins

    def weights_on(half: np.ndarray) -> np.ndarray:
        columns, enabled, metric = data.layout.targets, cfg.train.fallback, cfg.train.selection_metric
        return choose(errors, columns, enabled, ids, n_ids, metric, include=half, rule=decision.rule).weights.values

    run, one_window = decision.weights.values, (counts < 2)[:, None, None]
    # rows 0..n-1 for the earlier windows (set on the later), then n..2n-1 for the later ones
    on_later, on_earlier = weights_on(later), weights_on(~later)
    table = np.concatenate([np.where(one_window, run, on_later), np.where(one_window, run, on_earlier)])
    return Weights(decision.weights.names, table), ids + n_ids * later
