"""Conformal prediction intervals, calibrated on the validation windows only.

For each horizon step and column, the interval at level a is the forecast plus or minus the
ceil((n + 1) a)-th smallest of the n absolute validation errors of the shipped forecast (split
conformal prediction). The validation windows end before the test split, so the stated coverage is
tested honestly on it; the windows overlap, so the guarantee is approximate, and `evaluate` reports
the coverage reached.
"""

from __future__ import annotations

import numpy as np
import torch


def calibrate(
    forecast: torch.Tensor, truth: torch.Tensor, observed: torch.Tensor | None, levels: tuple[float, ...]
) -> torch.Tensor:
    """Half-widths (n_levels, H, C), scaled units, from validation forecasts and truth (N, H, C)."""
    errors = (truth - forecast).abs().double().numpy()  # (N, H, C)
    if observed is not None:
        errors = np.where(observed.numpy(), errors, np.nan)
    counts = np.maximum((~np.isnan(errors)).sum(axis=0), 1)  # (H, C) observed errors per step and column
    ordered = np.sort(errors, axis=0)  # NaN last
    widths = []
    for level in levels:
        rank = np.minimum(np.ceil((counts + 1) * level).astype(int), counts) - 1  # (H, C), 0-based
        widths.append(np.take_along_axis(ordered, rank[None], axis=0)[0])
    return torch.from_numpy(np.stack(widths)).float()


def label(level: float) -> str:
    """80 for 0.8, 97.5 for 0.975: the level in percent, as short as it can be written."""
    percent = round(100 * level, 6)
    return f"{percent:g}"


def coverage(
    forecast: torch.Tensor, truth: torch.Tensor, observed: torch.Tensor | None, half_width: torch.Tensor
) -> tuple[np.ndarray, np.ndarray]:
    """Per column: the share of observed truth inside forecast +- half_width (H, C), and the count scored."""
    inside = ((truth - forecast).abs() <= half_width).double()  # (N, H, C)
    weights = torch.ones_like(inside) if observed is None else observed.double()
    count = weights.sum(dim=(0, 1))
    share = (inside * weights).sum(dim=(0, 1)) / count.clamp(min=1.0)
    return share.numpy(), count.numpy()


def msis(
    forecast: np.ndarray,
    truth: np.ndarray,
    observed: np.ndarray | None,
    half_width: np.ndarray,
    std: np.ndarray,
    scale: np.ndarray,
    level: float,
) -> float:
    """Mean scaled interval score (M4): width plus 2/alpha times each miss, over the MASE scale.

    forecast, truth (N, H, C) scaled; half_width (H, C) scaled; std and scale (N, C) per window (its
    series' standard deviation and seasonal-naive MAE, in the CSV's units)."""
    alpha = 1 - level
    lower, upper = forecast - half_width, forecast + half_width
    penalty = (upper - lower) + 2 / alpha * (np.maximum(lower - truth, 0) + np.maximum(truth - upper, 0))
    points = penalty * std[:, None] / scale[:, None]  # (N, H, C), in units of the MASE scale
    keep = np.ones(points.shape, dtype=bool) if observed is None else observed
    return float(points[keep].mean()) if keep.any() else float("nan")


def quantile_loss(
    forecast: np.ndarray,
    truth: np.ndarray,
    observed: np.ndarray | None,
    half_widths: np.ndarray,
    levels: tuple[float, ...],
    mean: np.ndarray,
    std: np.ndarray,
) -> float:
    """Weighted quantile loss (the mean over quantiles of 2 x pinball loss / sum |y|, in the CSV's units)
    of the quantiles the intervals imply: the point forecast as the median, each interval's bounds as its
    (1 -+ level) / 2 quantiles. An approximation of the CRPS over those quantiles."""
    to_units = lambda x: x * std[:, None] + mean[:, None]  # noqa: E731  (N, H, C) scaled -> units
    y = to_units(truth)
    keep = np.ones(y.shape, dtype=bool) if observed is None else observed
    quantiles = [(0.5, forecast)]
    for level, width in zip(levels, half_widths, strict=True):
        quantiles += [((1 - level) / 2, forecast - width), ((1 + level) / 2, forecast + width)]
    denominator = np.abs(y[keep]).sum()
    losses = []
    for q, scaled in quantiles:
        error = y - to_units(scaled)
        pinball = np.maximum(q * error, (q - 1) * error)
        losses.append(2 * pinball[keep].sum() / max(denominator, 1e-12))
    return float(np.mean(losses))
