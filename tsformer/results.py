"""What a predictor gives: the forecasts of a batch of windows, and the summary of its training."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tsformer.intervals import interval_bounds


def significant(values: np.ndarray, digits: int = 6) -> np.ndarray:
    """float64 values rounded to `digits` significant digits (float32's last digit is noise)."""
    values = values.astype(np.float64)
    magnitude = np.floor(np.log10(np.abs(values), out=np.zeros_like(values), where=values != 0))
    factor = 10.0 ** (digits - 1 - magnitude)
    with np.errstate(invalid="ignore"):  # NaN (an unobserved truth) stays NaN
        return np.round(values * factor) / factor


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
        """(N, H, C) or (N, H, C, Q) scaled -> the data's units, to the 6 significant digits float32 holds (so 5.08
        is written 5.08, not 5.0799994); a value at the floor is 0 exactly (its scaled value, -mean/std in float32,
        comes back as a rounding error such as 5.96e-08)."""
        values = scaled.numpy() if isinstance(scaled, torch.Tensor) else scaled
        extra = values.ndim - 3  # a trailing quantile axis
        std, mean = (x[:, None].reshape(*x[:, None].shape, *[1] * extra) for x in (self.std, self.mean))
        units = (values * std + mean).astype(np.float32)
        if self.floor is not None:
            units[values <= self.floor.reshape(*self.floor.shape, *[1] * extra)] = 0.0  # -inf: no floor, none at it
        return significant(units)

    def scaled_bounds(self) -> list[tuple[float, np.ndarray, np.ndarray]]:
        """Per level: (level, lower, upper) (N, H, C) scaled: the point forecast -+ the half-width, not below the
        floor (`intervals.interval_bounds`)."""
        widths = () if self.half_widths is None else self.half_widths
        return interval_bounds(self.point.numpy(), widths, self.levels, self.floor)

    def bounds(self) -> list[tuple[float, np.ndarray, np.ndarray]]:
        """Per level: (level, lower, upper) (N, H, C) in the data's units."""
        return [(level, self.units(lower), self.units(upper)) for level, lower, upper in self.scaled_bounds()]
