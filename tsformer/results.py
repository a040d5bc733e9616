"""What a predictor gives: the forecasts of a batch of windows, and the summary of its training."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tsformer.intervals import interval_bounds


def to_units(scaled: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """float32 `scaled` values back in the data's units (`mean` and `std` broadcast), float64, written no finer than
    they are known: to the power of ten above float32's rounding of the scaled value (2^-22 of its |scaled| + 1
    standard deviations), or, where float32 holds the value in units more coarsely than that (a level far above its
    spread, as the CSV's float32 cells were read), as the shortest decimal of its float32. So 5.08 comes back 5.08,
    not 5.0799999, and a meter reading of 25,000,846 keeps every digit (a fixed 6 significant digits made it
    25,000,800)."""
    values = scaled.astype(np.float64) * std + mean
    with np.errstate(divide="ignore", invalid="ignore"):  # NaN (an unobserved truth) stays NaN
        exponent = np.ceil(np.log10((np.abs(scaled.astype(np.float64)) + 1.0) * std * 2.0**-22))
        as32 = values.astype(np.float32)
        coarser = np.spacing(np.abs(as32)) > 10.0**exponent
    units = _to_exponent(values, exponent)
    units[coarser] = _shortest(as32[coarser])  # the few levels far above their spread: nine passes over them alone
    return units


def _to_exponent(values: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """`values` rounded to 10 ** `exponent`, dividing or multiplying by an exact power of ten, so the result is the
    double nearest the decimal (5.08, not 5.080000000000001)."""
    up, down = 10.0 ** np.maximum(exponent, 0), 10.0 ** np.maximum(-exponent, 0)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(exponent >= 0, np.round(values / up) * up, np.round(values * down) / down)


def _shortest(as32: np.ndarray) -> np.ndarray:
    """float32 values as the float64 of their shortest decimal (at most 9 significant digits round-trip)."""
    values = as32.astype(np.float64)
    magnitude = np.floor(np.log10(np.abs(values), out=np.zeros_like(values), where=values != 0))
    shortest, found = values.copy(), ~np.isfinite(values)
    for digits in range(1, 10):
        rounded = _to_exponent(values, magnitude - (digits - 1))
        hit = ~found & (rounded.astype(np.float32) == as32)
        shortest[hit], found = rounded[hit], found | hit
    return shortest


@dataclass(frozen=True)
class TrainSummary:
    """What training did and chose, for the user."""

    best_epoch: int
    best_val_loss: float  # the score that chose it (`metrics.validation_score`): a panel's geometric mean
    epochs_run: int
    train_seconds: float
    n_parameters: int
    n_train_windows: int
    n_val_windows: int
    lines: tuple[str, ...] = ()  # per column: the model against the naive forecasters on validation, and the choice
    stopped_by: str = ""  # what ended training, in words (convergence, or a limit)
    best_val_mse: float = float("nan")  # that epoch's plain validation MSE (NaN: a run saved before it was kept)

    def trained_line(self, panel: bool) -> str:
        """What training did and chose, in one line; `panel`: its score is the series' geometric mean."""
        score = f" (its score {self.best_val_loss:.4f}: the geometric mean of the series' MSE)" if panel else ""
        return (
            f"trained {self.n_parameters:,} parameters on {self.n_train_windows} windows in "
            f"{self.train_seconds:.0f} s; best validation MSE {self.best_val_mse:.4f}{score} at epoch "
            f"{self.best_epoch} of {self.epochs_run} over {self.n_val_windows} validation windows, on which every "
            f"choice below was made; {self.stopped_by}"
        )


@dataclass(frozen=True)
class Forecasts:
    """N windows' forecasts, scaled: every forecaster's, and the shipped one with its quantiles and interval
    half-widths; `units` turns any of them into the data's units."""

    each: dict[str, torch.Tensor]  # "model" and each candidate (`tsformer.candidates`) -> (N, H, C)
    point: torch.Tensor  # (N, H, C): the forecaster chosen on validation for each window's series and column
    quantiles: torch.Tensor | None  # (N, H, C, Q) moved with the shipped point and conformally adjusted; None
    half_widths: np.ndarray | None  # (n_levels, N or 1, H, C); None for a run without intervals
    levels: tuple[float, ...]  # the intervals' levels
    quantile_levels: tuple[float, ...]  # the quantiles' levels, sorted
    mean: np.ndarray  # (N, C) each window's series' target mean, in the data's units
    std: np.ndarray  # (N, C) and scale
    chosen: np.ndarray  # (N, C) object: the forecaster of each window's column ("model", "repeat_last", ...)
    # (N, 1, C) scaled: no forecast, quantile or interval bound is below it (0 in the data's units where the
    # column reached zero in the series' training rows and never went below, -inf elsewhere); None: no floor
    floor: np.ndarray | None = None

    def units(self, scaled: torch.Tensor | np.ndarray) -> np.ndarray:
        """(N, H, C) or (N, H, C, Q) scaled -> the data's units, in float64 to the digits a scaled float32 holds
        (`to_units`); a value at the floor is 0 exactly (its scaled value, -mean/std in float32, comes back as a
        rounding error such as 5.96e-08)."""
        values = scaled.numpy() if isinstance(scaled, torch.Tensor) else scaled
        extra = values.ndim - 3  # a trailing quantile axis
        # (N, C) -> (N, 1, C) or (N, 1, C, 1): each window's series' statistics, for every step (and quantile)
        std, mean = (
            x[:, None].reshape(*x[:, None].shape, *[1] * extra).astype(np.float64) for x in (self.std, self.mean)
        )
        units = to_units(values, mean, std)
        if self.floor is not None:
            units[values <= self.floor.reshape(*self.floor.shape, *[1] * extra)] = 0.0  # -inf: no floor, none at it
        return units

    def scaled_bounds(self) -> list[tuple[float, np.ndarray, np.ndarray]]:
        """Per level: (level, lower, upper) (N, H, C) scaled: the point forecast -+ the half-width, not below the
        floor (`intervals.interval_bounds`)."""
        widths = () if self.half_widths is None else self.half_widths
        return interval_bounds(self.point.numpy(), widths, self.levels, self.floor)

    def bounds(self) -> list[tuple[float, np.ndarray, np.ndarray]]:
        """Per level: (level, lower, upper) (N, H, C) in the data's units."""
        return [(level, self.units(lower), self.units(upper)) for level, lower, upper in self.scaled_bounds()]
