"""After training, on the validation windows only: the fallback choice and the conformal calibration.

The trained model and the naive forecasters are scored on the validation windows; each column of each
series keeps the best (`tsformer.fallback`). The intervals and quantile pairs are then calibrated on the
errors there of the forecast chosen on the other half of each series' validation origins (cross-fitted,
`_cross_fitted`; `tsformer.intervals`), or, with `train.interval_calibration=refit`,
on those of a calibration model trained one validation + test stretch earlier, so its errors are
measured as far after its training data as a forecast after the data's end is after the run's.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from tsformer.config import Config
from tsformer.data import Prepared, Split, WindowIndex
from tsformer.data.prepare import prepare
from tsformer.errors import ConfigError, DataError, TrainingError
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
from tsformer.predictor import Predictor


def choose_and_calibrate(
    predictor: Predictor, val_windows: WindowIndex, data: Prepared, refit: Predictor | None = None
) -> tuple[Predictor, Decision]:
    """The predictor with its fallback chosen and its intervals and quantile pairs calibrated on the validation
    windows (around the chosen forecast, or with `refit` around the calibration model's), and the decision."""
    cfg = data.config
    windows = val_windows.split(cfg.model.context_len)
    ids = val_windows.series()  # (N,) each window's series
    forecasts = predictor.forecasters(windows)
    decision = decide(
        forecasts[0],
        windows.target,
        windows.target_observed,
        data.layout.targets,
        cfg.train.fallback,
        ids,
        data.frame.n_ids,
    )
    chosen = predictor.replace(fallback=decision.choice, calibration=None)
    if refit is None:  # the forecasts (N, H, C) and quantiles (N, H, C, Q) whose errors calibrate
        point, quantiles = _cross_fitted(forecasts, windows, ids, decision, data)
    else:
        point, quantiles = _refit_forecasts(refit, data, val_windows)
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
        method="validation" if refit is None else "refit",
        refit_borders=None if refit is None else refit.borders,
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
        observed = None if windows.target_observed is None else windows.target_observed[half]
        picked = {name: forecast[half] for name, forecast in each.items()}
        columns, enabled = data.layout.targets, cfg.train.fallback
        return decide(picked, windows.target[half], observed, columns, enabled, ids[half], n_ids).choice

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


def calibration_plan(data: Prepared) -> tuple[Prepared, Config | None]:
    """train.interval_calibration resolved: `data` with the choice in its config (and a note saying what auto
    chose), and the calibration model's config (None: no calibration model trains).

    auto chooses refit where every series with a validation stretch holds exactly one window (the
    long-format default: one window's errors, taken right after training, understate how far predict
    forecasts from its training data) and the earlier split has room; otherwise validation.
    """
    train = data.config.train
    choice, note, calibration_cfg = train.interval_calibration, "", None
    if train.intervals and choice == "refit":
        calibration_cfg = calibration_config(data)  # refused now, not after training
    elif train.intervals and choice == "auto" and _one_validation_window(data):
        try:
            calibration_cfg, choice = calibration_config(data), "refit"
            note = (
                "intervals: calibrated by a second model trained one validation + test stretch earlier, as each "
                "series' validation is one window (train.interval_calibration=refit; =validation skips it)"
            )
        except ConfigError as exc:
            note = f"intervals: calibrated on the validation windows, as a calibration model does not fit: {exc}"
    choice = "validation" if choice == "auto" else choice
    config = dataclasses.replace(data.config, train=dataclasses.replace(train, interval_calibration=choice))
    return dataclasses.replace(data, config=config, notes=data.notes + ((note,) if note else ())), calibration_cfg


def _one_validation_window(data: Prepared) -> bool:
    """Whether every series with a validation window has exactly one."""
    val_len = data.borders.val_end - data.borders.train_end
    horizon = data.config.model.horizon
    return bool((val_len[val_len >= horizon] == horizon).all())


def calibration_config(data: Prepared) -> Config:
    """The calibration model's config (train.interval_calibration=refit): each series' borders moved back by
    its validation and test lengths, so that model forecasts the run's validation windows from as far after
    its training data as predict forecasts from after the run's. It needs those lengths, and the rows after
    the test split, to be the same in every series with a validation stretch (the long-format default, or
    one series)."""
    borders, lengths = data.borders, data.frame.lengths
    has_val = borders.val_end - borders.train_end >= data.config.model.horizon  # series with a validation window
    val_len, test_len = borders.val_end - borders.train_end, borders.test_end - borders.val_end
    after = lengths - borders.test_end  # rows after the test split
    counts = {int(v) for v in val_len[has_val]}, {int(t) for t in test_len[has_val]}, {int(a) for a in after[has_val]}
    if any(len(values) != 1 for values in counts):
        raise ConfigError(
            "train.interval_calibration=refit needs the same validation and test lengths in every series (the "
            "long-format default split, or one series); use train.interval_calibration=validation or fix "
            "data.split_borders"
        )
    (v,), (t,), (a,) = counts
    gap = v + t  # how far predict forecasts after the run's training data
    ends = (-(a + gap + gap), -(a + gap + t), -(a + t))  # train', val', and the run's validation end, from the end
    train = dataclasses.replace(data.config.train, interval_calibration="validation")
    cfg = dataclasses.replace(data.config, data=dataclasses.replace(data.config.data, split_borders=ends), train=train)
    try:  # the calibration model's data must prepare (room in its split, training rows to scale), checked now
        prepare(data.frame, cfg, ())
    except DataError as exc:
        raise ConfigError(
            f"train.interval_calibration=refit moves the split back by {gap} steps, and then: {exc}; "
            "use train.interval_calibration=validation, or give the series more rows"
        ) from None
    return cfg


def _refit_forecasts(
    refit: Predictor, data: Prepared, val_windows: WindowIndex
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The calibration model's shipped forecast (N, H, C) and quantiles (N, H, C, Q) or None (its own fallback
    applied, its quantiles unadjusted) of the run's validation windows, in the run's scaled units. It reads
    the same rows in its own scaling."""
    own = refit.read()  # the data it was fit on: the run's rows
    if not np.array_equal(own.frame.bounds, data.frame.bounds):
        raise TrainingError("the calibration model read different rows from the run's data; train the run again")
    windows = dataclasses.replace(val_windows, inputs=own.inputs)
    ids = windows.series()  # (N,)
    shipped = refit.replace(calibration=None).forecast(windows.split(refit.context_len), ids)
    its_targets, run_targets = refit.scaler.first(data.layout.n_targets), data.scaler.first(data.layout.n_targets)

    def to_run_units(scaled: torch.Tensor) -> torch.Tensor:  # (N, ..., C) in its scaled units -> the run's
        rows = ids.reshape(-1, *[1] * (scaled.dim() - 2))  # each window's series, broadcast over the rest
        return torch.from_numpy(run_targets.transform(its_targets.inverse(scaled.numpy(), rows), rows))

    quantiles = shipped.quantiles
    if quantiles is not None:
        quantiles = to_run_units(quantiles.movedim(-1, 1)).movedim(1, -1)  # (N, Q, H, C) while converted
    return to_run_units(shipped.point), quantiles
