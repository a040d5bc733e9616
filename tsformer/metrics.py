"""Forecast metrics and the naive baselines they are compared against."""

from __future__ import annotations

import numpy as np
import torch
from pandas.tseries.frequencies import to_offset

# Seasonal period by the frequency's base unit: one day of hours, one week of days, ...
SEASONS = {"h": 24, "D": 7, "B": 5, "W": 52, "M": 12, "ME": 12, "MS": 12, "Q": 4, "QE": 4, "QS": 4}


def season_length(freq: str) -> int:
    """Steps per natural cycle: 24 for hourly, 7 for daily, 52 for weekly, 96 for 15-minute data, ..."""
    offset = to_offset(freq)
    base = offset.rule_code.split("-")[0]
    if base in SEASONS and offset.n == 1:
        return SEASONS[base]
    try:
        step = offset.nanos
    except ValueError:
        return 1
    day = 24 * 3600 * 10**9
    return int(day // step) if step < day and day % step == 0 else 1


def repeat_last(context: torch.Tensor, horizon: int) -> torch.Tensor:
    """(B, L, C) -> (B, H, C): the last observed value, repeated."""
    return context[:, -1:].expand(-1, horizon, -1)


def forward_fill(context: torch.Tensor, observed: torch.Tensor | None) -> torch.Tensor:
    """(B, L, C) with each unobserved cell replaced by the last observed one before it in the window
    (0, the training mean, when there is none): what the naive forecasters repeat. Causal."""
    if observed is None:
        return context
    steps = torch.arange(context.shape[1], device=context.device).view(1, -1, 1)  # (1, L, 1)
    last_seen = torch.where(observed, steps, torch.full_like(steps, -1)).cummax(dim=1).values  # (B, L, C)
    filled = context.gather(1, last_seen.clamp(min=0))
    return torch.where(last_seen >= 0, filled, torch.zeros((), dtype=context.dtype))


def usable_season(season: int, history: int) -> int:
    """`season` if `history` earlier steps reach one season back from the step forecast, else 1 (repeat the last)."""
    return season if season <= history else 1


def seasonal_naive(context: torch.Tensor, horizon: int, season: int) -> torch.Tensor:
    """(B, L, C) -> (B, H, C): the last full season, repeated (the last value when L < season)."""
    season = usable_season(season, context.shape[1])
    last_season = context[:, -season:]  # (B, season, C)
    repeats = -(-horizon // season)
    return last_season.repeat(1, repeats, 1)[:, :horizon]


def mase_scale(train_values: np.ndarray, season: int) -> np.ndarray:
    """Per-column MAE of the seasonal-naive forecast on the training rows (original units)."""
    season = usable_season(season, len(train_values) - 1)  # the last row has len - 1 rows before it
    diffs = np.abs(train_values[season:] - train_values[:-season])  # NaN where either cell is unobserved
    pairs = ~np.isnan(diffs)
    scale = np.where(pairs, diffs, 0.0).sum(axis=0) / np.maximum(pairs.sum(axis=0), 1)
    return np.where(scale > 0, scale, 1.0)


def score(
    forecast: np.ndarray,
    truth: np.ndarray,
    std: np.ndarray,
    columns: tuple[str, ...],
    mase_denominator: np.ndarray,
    observed: np.ndarray | None = None,
) -> dict:
    """Metrics of scaled (N, H, C) forecasts: MSE/MAE scaled, MAE/RMSE original units, MASE; per column and mean.

    `observed` (N, H, C) bool leaves unobserved truth cells out (None: every cell counts).
    """
    error = forecast - truth  # scaled units
    error_orig = error * std  # original units (the mean cancels)
    per_column = {}
    for j, name in enumerate(columns):
        keep = np.ones(error.shape[:-1], dtype=bool) if observed is None else observed[..., j]
        e, eo = error[..., j][keep], error_orig[..., j][keep]
        if not len(e):  # no observed truth in this column's test windows: nothing to score
            continue
        per_column[name] = {
            "mse": float(np.mean(e**2)),
            "mae": float(np.mean(np.abs(e))),
            "mae_original": float(np.mean(np.abs(eo))),
            "rmse_original": float(np.sqrt(np.mean(eo**2))),
            "mase": float(np.mean(np.abs(eo)) / mase_denominator[j]),
        }
    keys = ("mse", "mae", "mae_original", "rmse_original", "mase")
    average = {k: float(np.mean([m[k] for m in per_column.values()])) if per_column else None for k in keys}
    return {"mean": average, "per_column": per_column}
