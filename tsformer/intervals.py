"""Conformal prediction intervals, calibrated on the validation windows only.

For each horizon step and column, the interval at level a is the forecast plus or minus the
ceil((n + 1) a)-th smallest of the n absolute validation errors of the shipped forecast (split
conformal prediction; each window's error is that of the forecaster chosen without it, see
`tsformer.calibration`). The validation windows end before the test split, so the stated coverage is
tested honestly on it; the windows overlap, so the guarantee is approximate, and `evaluate` reports
the coverage reached.

With `train.interval_scale=seasonal` (the default) the errors are first divided by each window's
scale, the mean absolute seasonal difference of its own context (normalised conformal prediction), and
an interval is that quantile times its window's scale: wide after a volatile stretch, narrow after a
calm one. The scale reads the context only, never a value after the origin. A window whose history is
too short for it takes the typical (median) validation window's scale, and none goes below a tenth of
that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from tsformer.metrics import mean_defined

# windows forecast or measured at a time (the candidates, the context change, the fallback's blocks): their
# forward-filled contexts, float64 copies and sums stay small
CHUNK_WINDOWS = 16_384
QUANTILE_GROUPS = 3  # quantiles are calibrated per group of windows: a candidate alone, the model alone, a mix
# how quantile shifts were made: per group of windows in units of each window's scale (format 16), per group in
# scaled units (15), one per level (14), each pair widened (to 13)
QUANTILE_METHODS = ("scaled", "groups", "levels", "pairs")
GROUP_WEIGHTS = (0.0, 1.0, 0.5)  # each group's weight on the model's offsets where it has too few windows of its own
SCALE_FLOOR = 0.1  # no window's scale is below this share of the typical validation window's


@dataclass(frozen=True)
class Calibration:
    """A run's conformal calibration: interval half-widths and each quantile's shift, in scaled units (per
    unit of each window's scale with seasonal widths)."""

    levels: tuple[float, ...]  # interval levels, e.g. (0.8, 0.95)
    widths: torch.Tensor  # (n_levels, H, C) half-widths: scaled units, or units of each window's scale
    typical: torch.Tensor | None  # (C,) the median validation window's scale; None: fixed widths (one per step)
    season: int  # the lag of each window's scale (its context's mean seasonal change)
    # (QUANTILE_GROUPS, Q, H, C) shift of each quantile per group of windows (`calibrate_quantiles`), per unit of
    # each window's scale where the widths are ("scaled"); None: none
    quantile_adjust: torch.Tensor | None = None
    # how quantile_adjust was made (QUANTILE_METHODS): "scaled" or "groups" (`calibrate_quantiles` with and without
    # the windows' scales), or an earlier format's, stored as the same shifts for every group around the model's
    # whole offsets (its check cannot remake it)
    quantile_method: str = "groups"
    n_errors: int = 0  # calibration errors per step and column (the fewest over steps and columns)
    unsupported: tuple[tuple[float, int], ...] = ()  # (level, errors it needs): asked for, left out

    def note(self) -> str:
        """One line on the levels left out for want of calibration windows; "" when none was."""
        if not self.unsupported:
            return ""
        left = ", ".join(f"{label(level)} %" for level, _ in self.unsupported)
        needs = ", ".join(f"{n} for {label(level)} %" for level, n in self.unsupported)
        highest = math.floor(100 * self.n_errors / (self.n_errors + 1)) / 100  # about the highest level n errors hold
        lower = f", or a level up to {label(highest)} % (--interval {highest:g})" if self.n_errors >= 2 else ""
        return (
            f"intervals: {left} left out: split-conformal calibration holds a level only with enough validation "
            f"windows ({needs}), and this run has {self.n_errors}; give more validation rows (data.split_ratios, "
            f"or longer series){lower}"
        )

    def window_scales(self, windows) -> torch.Tensor | None:
        """Each window's scale (N, C) that the widths, and "scaled" quantile shifts, are per unit of, from
        `windows` (a `data.Split`: each reads its context (N, L, C) and its observed mask only); None: fixed
        widths."""
        return forecast_scale(self.typical, windows.context, windows.context_observed, self.season)

    def half_widths(self, windows, scale: torch.Tensor | None = None) -> np.ndarray | None:
        """The half-widths (n_levels, N, H, C) of `windows`, scaled units, or (n_levels, 1, H, C) when they do
        not depend on the window (fixed widths); None without levels. `scale`: their `window_scales`, when
        already made."""
        if not self.levels:
            return None
        scale = self.window_scales(windows) if scale is None else scale
        return half_widths(self.widths, scale).numpy()


def context_change(context: torch.Tensor, observed: torch.Tensor | None, season: int) -> torch.Tensor:
    """Each window's mean |x_t - x_(t - lag)| over the observed pairs of its context (N, L, C), scaled units:
    the in-context error of seasonal naive, lag = season (1 when the context is not longer than a season).
    NaN where the context holds fewer than `lag` pairs (a short history): (N, C), float64."""
    if len(context) > CHUNK_WINDOWS:  # each window on its own: no (N, L, C) float64 copy of all of them
        return torch.cat(
            [
                context_change(
                    context[start : start + CHUNK_WINDOWS],
                    None if observed is None else observed[start : start + CHUNK_WINDOWS],
                    season,
                )
                for start in range(0, len(context), CHUNK_WINDOWS)
            ]
        )
    lag = season if 1 <= season < context.shape[1] else 1
    change = (context[:, lag:] - context[:, :-lag]).abs().double()  # (N, L - lag, C)
    if observed is None:
        pairs = torch.full(change.shape[::2], float(change.shape[1]), dtype=torch.float64)  # (N, C)
        total = change.sum(dim=1)
    else:
        both = observed[:, lag:] & observed[:, :-lag]  # (N, L - lag, C): both ends observed
        pairs = both.sum(dim=1).double()
        total = change.masked_fill(~both, 0.0).sum(dim=1)
    return torch.where(pairs >= lag, total / pairs.clamp(min=1.0), torch.nan)


def typical_scale(change: torch.Tensor) -> torch.Tensor:
    """Per column (C,), the median of the validation windows' context changes (N, C); 1 where none has one."""
    typical = torch.nan_to_num(torch.nanmedian(change, dim=0).values, nan=1.0)
    return typical.clamp(min=1e-6).float()  # a column flat all through validation still divides


def window_scale(change: torch.Tensor, typical: torch.Tensor) -> torch.Tensor:
    """Each window's scale (N, C): its context change (N, C), the typical one (C,) where its history is too
    short for one, and never below SCALE_FLOOR x typical (a flat stretch keeps some width)."""
    own = torch.where(torch.isnan(change), typical.double(), change)
    return torch.maximum(own, SCALE_FLOOR * typical.double()).float()


def calibration_scale(
    mode: str, context: torch.Tensor, observed: torch.Tensor | None, season: int
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """For `train.interval_scale` `mode`, the validation windows' scales (N, C) and the typical scale (C,)
    to keep with the widths; (None, None) for "fixed" (one width per step)."""
    if mode != "seasonal":
        return None, None
    change = context_change(context, observed, season)
    typical = typical_scale(change)
    return window_scale(change, typical), typical


def forecast_scale(
    typical: torch.Tensor | None, context: torch.Tensor, observed: torch.Tensor | None, season: int
) -> torch.Tensor | None:
    """The scales (N, C) of windows to forecast, given the typical validation scale (C,) kept at calibration;
    None without one (fixed widths)."""
    return None if typical is None else window_scale(context_change(context, observed, season), typical)


def half_widths(widths: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """Each window's half-widths (n_levels, N, H, C), scaled units, from the calibrated widths (n_levels, H, C):
    times the window's scale (N, C), or the same for every window when `scale` is None (one window)."""
    if scale is None:
        return widths[:, None]
    return widths[:, None] * scale[None, :, None, :]


def errors_needed(level: float) -> int:
    """The fewest calibration errors n for which split conformal has a finite quantile at `level`:
    ceil((n + 1) level) <= n, so n >= level / (1 - level): 4 for 80 %, 9 for 90 %, 19 for 95 %."""
    return math.ceil(round(level / (1 - level), 9))


def error_counts(observed: torch.Tensor | None, shape: tuple[int, ...]) -> int:
    """The fewest observed calibration errors of any step and column, for errors of `shape` (N, H, C)."""
    if observed is None:
        return int(shape[0])
    return int(observed.sum(dim=0).min()) if observed.numel() else 0


def calibrate(
    forecast: torch.Tensor,
    truth: torch.Tensor,
    observed: torch.Tensor | None,
    levels: tuple[float, ...],
    scale: torch.Tensor | None = None,
    floor: torch.Tensor | float = 0.0,
) -> torch.Tensor:
    """Half-widths (n_levels, H, C) from validation forecasts and truth (N, H, C): in scaled units, or in
    units of each window's `scale` (N, C) when given; none below `floor` (a number, or one per column (C,)),
    so that calibration errors that happen to be zero at a step do not claim certainty there."""
    errors = (truth - forecast).abs()  # (N, H, C)
    if scale is not None:
        errors = errors / scale[:, None, :]
    errors = errors.numpy()  # float32: ample for a rank statistic
    if observed is not None:
        errors = np.where(observed.numpy(), errors, np.float32(np.nan))
    counts = np.maximum((~np.isnan(errors)).sum(axis=0), 1)  # (H, C) observed errors per step and column
    errors.sort(axis=0)  # in place, NaN last
    ordered = errors
    widths = []
    for level in levels:
        rank = np.minimum(np.ceil((counts + 1) * level).astype(int), counts) - 1  # (H, C), 0-based
        widths.append(np.take_along_axis(ordered, rank[None], axis=0)[0])
    if not widths:
        return torch.zeros(0, *truth.shape[1:])
    floor = floor.numpy() if isinstance(floor, torch.Tensor) else floor
    return torch.from_numpy(np.maximum(np.stack(widths), np.float32(floor))).float()


def label(level: float) -> str:
    """80 for 0.8, 97.5 for 0.975: the level in percent, as short as it can be written."""
    percent = round(100 * level, 6)
    return f"{percent:g}"


def interval_bounds(
    forecast: np.ndarray, widths: np.ndarray | tuple, levels: tuple[float, ...], floor: np.ndarray | None = None
) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """Per level: (level, lower, upper) (N, H, C), the forecast (N, H, C) -+ its half-width (`widths`
    (n_levels, N or 1, H, C)), neither below `floor` ((N, 1, C), or None: no floor; the forecast is at or above it)."""
    low = -np.inf if floor is None else floor
    return [
        (level, np.maximum(forecast - width, low), np.maximum(forecast + width, low))
        for level, width in zip(levels, widths, strict=True)
    ]


def coverage(
    lower: torch.Tensor, upper: torch.Tensor, truth: torch.Tensor, observed: torch.Tensor | None
) -> tuple[np.ndarray, np.ndarray]:
    """Per column: the share of observed truth (N, H, C) inside [lower, upper] (each broadcast to it), and the
    count scored."""
    inside = ((truth >= lower) & (truth <= upper)).double()  # (N, H, C)
    weights = torch.ones_like(inside) if observed is None else observed.double()
    count = weights.sum(dim=(0, 1))
    share = (inside * weights).sum(dim=(0, 1)) / count.clamp(min=1.0)
    return share.numpy(), count.numpy()


def msis(
    lower: np.ndarray,
    upper: np.ndarray,
    truth: np.ndarray,
    observed: np.ndarray | None,
    std: np.ndarray,
    scale: np.ndarray,
    level: float,
) -> float:
    """Mean scaled interval score (M4): width plus 2/alpha times each miss, over the MASE scale.

    lower, upper, truth (N, H, C) scaled; std and scale (N, C) per window (its series' standard deviation and
    seasonal-naive MAE, in the CSV's units; NaN: none, left out)."""
    alpha = 1 - level
    penalty = (upper - lower) + 2 / alpha * (np.maximum(lower - truth, 0) + np.maximum(truth - upper, 0))
    points = penalty * std[:, None] / scale[:, None]  # (N, H, C), in units of the MASE scale
    return mean_defined(points if observed is None else points[observed])  # a series without a MASE scale: none


def interval_quantiles(
    forecast: np.ndarray, bounds: list[tuple[float, np.ndarray, np.ndarray]]
) -> list[tuple[float, np.ndarray]]:
    """The quantiles the intervals imply: the point forecast (N, H, C) as the median, each interval's bounds
    ((level, lower, upper), `interval_bounds`) as its (1 -+ level) / 2 quantiles; (level, values) pairs."""
    quantiles = [(0.5, forecast)]
    for level, lower, upper in bounds:
        quantiles += [((1 - level) / 2, lower), ((1 + level) / 2, upper)]
    return sorted(quantiles, key=lambda pair: pair[0])


def quantile_loss(
    quantiles: list[tuple[float, np.ndarray]],
    truth: np.ndarray,
    observed: np.ndarray | None,
    mean: np.ndarray,
    std: np.ndarray,
) -> float:
    """Weighted quantile loss: the mean over quantiles of 2 x the pinball loss summed over points / sum |y|,
    in the CSV's units (an approximation of the CRPS over those quantiles). Values and truth (N, H, C)
    scaled; mean and std (N, C) per window."""
    to_units = lambda x: x * std[:, None] + mean[:, None]  # noqa: E731  (N, H, C) scaled -> units
    y = to_units(truth)
    keep = np.ones(y.shape, dtype=bool) if observed is None else observed
    denominator = max(float(np.abs(y[keep]).sum()), 1e-12)
    losses = []
    for q, scaled in quantiles:
        error = y - to_units(scaled)
        pinball = np.maximum(q * error, (q - 1) * error)
        losses.append(2 * pinball[keep].sum() / denominator)
    return float(np.mean(losses))


def quantile_pairs(quantiles: tuple[float, ...]) -> list[tuple[int, int]]:
    """(lower, upper) indexes into the sorted quantiles of each symmetric pair (q, 1 - q), q < 0.5."""
    ordered = sorted(quantiles)
    index = {round(q, 9): i for i, q in enumerate(ordered)}
    return [(i, index[round(1 - q, 9)]) for i, q in enumerate(ordered) if q < 0.5 and round(1 - q, 9) in index]


def weight_groups(model_weight: torch.Tensor) -> torch.Tensor:
    """(N, C) long: each window's quantile group by the model's weight in its shipped forecast (N, C): 0 a
    candidate alone (weight 0), 1 the model alone (1), 2 a mix. Each group's quantiles are calibrated on its own
    windows, as their spreads differ: a candidate's forecast carries none of the model's offsets."""
    return torch.where(model_weight <= 0, 0, torch.where(model_weight >= 1, 1, 2)).long()


def shipped_quantiles(
    model_quantiles: torch.Tensor, model_point: torch.Tensor, point: torch.Tensor, model_weight: torch.Tensor
) -> torch.Tensor:
    """(N, H, C, Q) the quantiles around the shipped `point` (N, H, C) before their conformal shifts: the model's
    offsets from its own point, times the model's weight in the shipped forecast (`model_weight` (N, C)). The
    offsets describe the model's errors: a candidate that ships alone gets its point, and its group's shifts."""
    return _quantiles_at(point, model_quantiles - model_point.unsqueeze(-1), model_weight)


def calibrate_quantiles(
    point: torch.Tensor,
    offsets: torch.Tensor,
    weight: torch.Tensor,
    truth: torch.Tensor,
    observed: torch.Tensor | None,
    levels,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Split conformal, one quantile at a time and per group of windows (`weight_groups` of `weight` (N, C), the
    model's weight in each window's shipped forecast): per group, quantile, step and column, the shift that puts
    its level's share of the group's validation truth at or below its quantile, point (N, H, C) plus weight times
    the model's offsets (N, H, C, Q) at `levels` (Q,) -> shifts (QUANTILE_GROUPS, Q, H, C), scaled. A group with
    fewer windows at a step than the most extreme level needs (`errors_needed`) takes, at every level, the shifts
    of all windows' quantiles made at the group's weight (0, 1, or a half for a mix): never the other groups'.

    A shifted quantile at level q is the residual's (truth - quantile) order statistic of rank ceil((n + 1) q) for
    q >= 0.5 and floor((n + 1) q) below it, of the n residuals. Each level stands on its own, so a quantile head
    whose offsets sit on the wrong side of the point (a short training) is moved back to where the truth fell,
    and a pair (q, 1 - q) holds about 1 - 2q of it. With `scale` (N, C), each window's scale (as the intervals'
    widths are normalised), the residuals are divided by it and the shifts are per unit of a window's scale
    (`adjust_quantiles` multiplies them back by the forecast window's): a band from volatile validation months
    narrows after a calm stretch, as the intervals do."""
    seen = torch.ones(truth.shape, dtype=torch.bool) if observed is None else observed
    groups = weight_groups(weight)  # (N, C)
    needed = max((errors_needed(max(float(q), 1 - float(q))) for q in levels), default=1)
    shipped = _quantiles_at(point, offsets, weight)  # (N, H, C, Q)
    shifts = []
    for group, stand_in in enumerate(GROUP_WEIGHTS):
        members = seen & (groups == group)[:, None, :]  # (N, H, C)
        own, counts = _level_shifts(shipped, truth, members, levels, scale)
        if (counts < needed).any():  # decided once per step and column
            at_stand_in = _quantiles_at(point, offsets, torch.full_like(weight, stand_in))
            own = torch.where(counts >= needed, own, _level_shifts(at_stand_in, truth, seen, levels, scale)[0])
        shifts.append(own)
    return torch.stack(shifts)


def _quantiles_at(point: torch.Tensor, offsets: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(N, H, C, Q) the point (N, H, C) plus the offsets (N, H, C, Q) times the weight (N, C)."""
    return point.unsqueeze(-1) + weight[:, None, :, None] * offsets


def _level_shifts(
    quantiles: torch.Tensor, truth: torch.Tensor, members: torch.Tensor, levels, scale: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each level's shift (Q, H, C) over the residuals `members` (N, H, C) marks, each divided by its window's
    `scale` (N, C) when given, and their counts (Q, H, C)."""
    y = truth.double()
    per = 1.0 if scale is None else scale.double()[:, None, :]  # (N, 1, C)
    shifts, counts = [], []
    for k, level in enumerate(float(q) for q in levels):
        residual = np.where(members.numpy(), ((y - quantiles[..., k].double()) / per).numpy(), np.nan)  # (N, H, C)
        n = (~np.isnan(residual)).sum(axis=0)  # (H, C)
        ordered = np.sort(residual, axis=0)  # NaN last
        ranks = np.ceil((n + 1) * level) if level >= 0.5 else np.floor((n + 1) * level)
        rank = np.clip(ranks.astype(int), 1, np.maximum(n, 1)) - 1  # (H, C), 0-based
        shifts.append(np.nan_to_num(np.take_along_axis(ordered, rank[None], axis=0)[0]))
        counts.append(n)
    if not shifts:
        return torch.zeros(0, *truth.shape[1:]), torch.zeros(0, *truth.shape[1:])
    return torch.from_numpy(np.stack(shifts)).float(), torch.from_numpy(np.stack(counts))


def pair_shifts(widening: torch.Tensor, pairs: list[tuple[int, int]], n_quantiles: int) -> torch.Tensor:
    """An earlier format's widening of each pair (n_pairs, H, C) as shifts of each quantile, the same for every
    group (QUANTILE_GROUPS, Q, H, C): the lower one down, the upper one up, the others (the median) unmoved."""
    shifts = torch.zeros(n_quantiles, *widening.shape[1:], dtype=widening.dtype)
    for k, (lo, hi) in enumerate(pairs):
        shifts[lo], shifts[hi] = -widening[k], widening[k]
    return shifts.expand(QUANTILE_GROUPS, *shifts.shape).clone()


def adjust_quantiles(
    quantiles: torch.Tensor, shifts: torch.Tensor | None, groups: torch.Tensor, scale: torch.Tensor | None = None
) -> torch.Tensor:
    """Each quantile (N, H, C, Q) moved by its group's shift (shifts (QUANTILE_GROUPS, Q, H, C), groups (N, C)),
    times its window's `scale` (N, C) where the shifts are per unit of it, then sorted so that none cross."""
    if shifts is None:
        return quantiles
    n, h, c, _ = quantiles.shape
    by_group = shifts.permute(0, 2, 3, 1)  # (G, H, C, Q)
    picked = by_group[
        groups[:, None, :], torch.arange(h)[None, :, None], torch.arange(c)[None, None, :]
    ]  # (N, H, C, Q)
    if scale is not None:
        picked = picked * scale[:, None, :, None]
    return (quantiles + picked).sort(dim=-1).values
