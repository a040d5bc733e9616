"""Forecast metrics and the naive baselines they are compared against."""

from __future__ import annotations

from dataclasses import dataclass

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
    """Per-column MAE of the seasonal-naive forecast on one series' training rows (original units); NaN where
    it is 0 or there is no pair to difference (MASE is undefined there, and left out of the averages)."""
    season = usable_season(season, max(len(train_values) - 1, 1))  # the last row has len - 1 rows before it
    diffs = np.abs(train_values[season:] - train_values[:-season])  # NaN where either cell is unobserved
    pairs = ~np.isnan(diffs)
    scale = np.where(pairs, diffs, 0.0).sum(axis=0) / np.maximum(pairs.sum(axis=0), 1)
    return np.where(scale > 0, scale, np.nan)


def smape(forecast: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """The M4 competition's symmetric APE per point, in %: 200 |y - f| / (|y| + |f|) (0 where both are 0)."""
    denominator = np.abs(truth) + np.abs(forecast)
    return np.where(denominator > 0, 200 * np.abs(truth - forecast) / np.where(denominator > 0, denominator, 1), 0.0)


METRICS = ("mse", "mae", "mae_original", "rmse_original", "smape", "mase")


def point_errors(
    forecast: np.ndarray, truth: np.ndarray, mean: np.ndarray, std: np.ndarray, mase_denominator: np.ndarray
) -> dict[str, np.ndarray]:
    """Per point (N, H, C): squared and absolute error (scaled), absolute and squared error in the CSV's
    units, sMAPE (%), and the absolute error over the series' MASE scale. mean, std and mase_denominator
    are (N, C) per window (its series') or (1, C)."""
    mean, std, denominator = mean[:, None], std[:, None], mase_denominator[:, None]  # (N or 1, 1, C)
    error = forecast - truth  # scaled units
    error_orig = error * std  # original units (the mean cancels)
    return {
        "mse": error**2,
        "mae": np.abs(error),
        "mae_original": np.abs(error_orig),
        "rmse_original": error_orig**2,  # the root is taken after averaging
        "smape": smape(forecast * std + mean, truth * std + mean),
        "mase": np.abs(error_orig) / denominator,
    }


def mean_defined(values: np.ndarray | list[float]) -> float:
    """The mean of the values that are defined (a series or column without a MASE scale has none); NaN if none
    is."""
    values = np.asarray(values, dtype=np.float64)
    defined = values[~np.isnan(values)]
    return float(defined.mean()) if len(defined) else float("nan")


def _averages(points: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, float]:
    """Each metric's mean over the kept points; MASE over those whose series has a scale (NaN if none has)."""
    averages = {name: float(np.mean(values[keep])) for name, values in points.items() if name != "mase"}
    averages["mase"] = mean_defined(points["mase"][keep])
    averages["rmse_original"] = float(np.sqrt(averages["rmse_original"]))
    return averages


def score(
    forecast: np.ndarray,
    truth: np.ndarray,
    mean: np.ndarray,
    std: np.ndarray,
    columns: tuple[str, ...],
    mase_denominator: np.ndarray,
    observed: np.ndarray | None = None,
) -> dict:
    """Metrics of scaled (N, H, C) forecasts: MSE/MAE scaled, MAE/RMSE original units, sMAPE, MASE; per column
    and the mean over columns. Averages run over every observed point, so with one window per series (the
    M4 protocol) sMAPE and MASE are the means over series of each series' mean.

    `observed` (N, H, C) bool leaves unobserved truth cells out (None: every cell counts).
    """
    points = point_errors(forecast, truth, mean, std, mase_denominator)
    per_column = {}
    for j, name in enumerate(columns):
        keep = np.ones(forecast.shape[:-1], dtype=bool) if observed is None else observed[..., j]
        if not keep.any():  # no observed truth in this column's test windows: nothing to score
            continue
        per_column[name] = _averages({k: v[..., j] for k, v in points.items()}, keep)
    average = {k: mean_defined([m[k] for m in per_column.values()]) if per_column else None for k in METRICS}
    return {"mean": average, "per_column": per_column}


def score_by_series(
    forecast: np.ndarray,
    truth: np.ndarray,
    mean: np.ndarray,
    std: np.ndarray,
    mase_denominator: np.ndarray,
    observed: np.ndarray | None,
    window_ids: np.ndarray,
    n_ids: int,
) -> list[dict[str, float] | None]:
    """Per series (window_ids (N,) names each window's), per column j: [series][j] metrics, or None when
    a series has no observed test point in that column; a list of n_ids lists."""
    points = point_errors(forecast, truth, mean, std, mase_denominator)
    keep_all = np.ones(forecast.shape, dtype=bool) if observed is None else observed
    order = np.argsort(window_ids, kind="stable")
    edges = np.searchsorted(window_ids[order], np.arange(n_ids + 1))
    out = []
    for i in range(n_ids):
        rows = order[edges[i] : edges[i + 1]]
        per_column = []
        for j in range(forecast.shape[-1]):
            keep = keep_all[rows, :, j]
            per_column.append(_averages({k: v[rows, :, j] for k, v in points.items()}, keep) if keep.any() else None)
        out.append(per_column)
    return out


# A series' validation MSE (scaled) below this counts as this in a panel's score: it is as good as solved, and no
# near-exact series should outweigh the rest through its logarithm
PANEL_SCORE_FLOOR = 1e-4


@dataclass(frozen=True)
class ValidationScore:
    """What chooses the epoch and the search's recipes: `score`, beside the plain MSE over every observed target."""

    score: float  # one series (a wide file): its MSE; a panel: the geometric mean of each series and column's MSE
    mse: float


def validation_score(
    squared_sums: torch.Tensor, counts: torch.Tensor, series: np.ndarray, n_series: int
) -> ValidationScore:
    """From each window's summed squared error and observed steps per column, (N, C) each, of series `series` (N,).

    A panel's series weigh alike whatever their scale and difficulty (as M4's relative measures weigh them, and as
    the fallback's rule is scored): a few series far outside their training range, whose errors are tens of
    standard deviations, would otherwise choose the epoch for all of them. One series keeps the arithmetic MSE,
    the figure its protocol reports (ETTh1's). Cells without an observed target are left out; none observed: 0,
    as nothing was there to miss."""
    total = float(counts.sum())
    mse = float(squared_sums.sum()) / total if total else 0.0
    if n_series <= 1 or not total:
        return ValidationScore(mse, mse)
    ids = torch.from_numpy(np.asarray(series, dtype=np.int64))
    sums = torch.zeros(n_series, squared_sums.shape[1], dtype=torch.float64).index_add_(0, ids, squared_sums.double())
    steps = torch.zeros_like(sums).index_add_(0, ids, counts.double())  # (n_series, C)
    seen = steps > 0
    cell_mse = (sums[seen] / steps[seen]).clamp(min=PANEL_SCORE_FLOOR)
    return ValidationScore(float(cell_mse.log().mean().exp()), mse)


def squared_error_sums(
    forecast: torch.Tensor, target: torch.Tensor, observed: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each window's summed squared error and observed steps per column, (N, C) float64 each, of (N, H, C)."""
    error = (forecast.double() - target.double()).square()
    if observed is None:
        return error.sum(1), torch.full(error.shape[::2], float(error.shape[1]), dtype=torch.float64)
    return error.masked_fill(~observed, 0.0).sum(1), observed.sum(1).double()
