"""Never worse than naive on validation: per column, the forecast is the model's or a naive forecaster's.

At the end of training the model and the naive forecasters (repeat-last, seasonal naive) are scored
on the validation windows only; each column keeps the forecaster with the lowest MSE there (the model
on a tie). The choice is stored in the checkpoint, and `predict` and `evaluate` apply it. The test
split is never used for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tsformer.data.prepare import Split
from tsformer.metrics import forward_fill, repeat_last, season_length, seasonal_naive, usable_season
from tsformer.model import Forecaster

FORECASTERS = ("model", "repeat_last", "seasonal_naive")  # in order of preference on a tie
LABELS = {"model": "the model", "repeat_last": "repeat-last", "seasonal_naive": "seasonal naive"}


@dataclass(frozen=True)
class Decision:
    columns: tuple[str, ...]
    choice: tuple[str, ...]  # per column, one of FORECASTERS
    val_mse: dict[str, tuple[float, ...]]  # forecaster -> per-column validation MSE

    def lines(self) -> list[str]:
        """One line per column: what each scored on validation and what is used."""
        out = []
        for j, column in enumerate(self.columns):
            model = self.val_mse["model"][j]
            best_naive = min(FORECASTERS[1:], key=lambda name: self.val_mse[name][j])
            out.append(
                f"{column}: model {model:.4g} vs {LABELS[best_naive]} {self.val_mse[best_naive][j]:.4g} "
                f"on validation: using {LABELS[self.choice[j]]}"
            )
        return out


def season_for(freq: str, context_len: int) -> int:
    """The seasonal-naive period: the frequency's season if the context reaches one season back, else 1."""
    return usable_season(season_length(freq), context_len)


def all_forecasts(model: Forecaster, windows: Split, season: int) -> dict[str, torch.Tensor]:
    """Every forecaster's forecast (N, H, C) of the windows' contexts (N, L, C): the model's (which also
    reads their covariates), then the naive ones."""
    contexts, observed = windows.context, windows.context_observed
    forecast = torch.cat(list(model.predict_batches(contexts, observed, windows.covariates))).cpu()
    return {"model": forecast, **naive_forecasts(contexts, observed, model.cfg.horizon, season)}


def naive_forecasts(
    contexts: torch.Tensor, observed: torch.Tensor | None, horizon: int, season: int
) -> dict[str, torch.Tensor]:
    """The naive forecasts (N, H, C) of contexts (N, L, C), repeating the last observed values."""
    history = forward_fill(contexts, observed)
    return {"repeat_last": repeat_last(history, horizon), "seasonal_naive": seasonal_naive(history, horizon, season)}


def decide(
    forecasts: dict[str, torch.Tensor],
    truth: torch.Tensor,
    truth_observed: torch.Tensor | None,
    columns: tuple[str, ...],
    enabled: bool = True,
) -> Decision:
    """Per column, the forecaster of `forecasts` (each (N, H, C)) with the lowest MSE on `truth`."""
    weights = torch.ones_like(truth) if truth_observed is None else truth_observed.to(truth.dtype)
    count = weights.sum(dim=(0, 1)).clamp(min=1.0)  # (C,)
    val_mse = {
        name: tuple(((forecasts[name] - truth).square() * weights).sum(dim=(0, 1)).div(count).tolist())
        for name in FORECASTERS
    }
    choice = tuple(
        min(FORECASTERS, key=lambda name: (val_mse[name][j], FORECASTERS.index(name))) if enabled else "model"
        for j in range(len(columns))
    )
    return Decision(columns, choice, val_mse)


def apply(choice: tuple[str, ...], forecasts: dict[str, torch.Tensor]) -> torch.Tensor:
    """(N, H, C): each column from its chosen forecaster (the model's where `choice` is empty)."""
    if not choice or all(name == "model" for name in choice):
        return forecasts["model"]
    return torch.stack([forecasts[name][..., j] for j, name in enumerate(choice)], dim=-1)


def shipped_quantiles(model: Forecaster, windows: Split, forecasts: dict[str, torch.Tensor], choice: tuple[str, ...]):
    """The model's quantiles (N, H, C, Q) of the windows, moved with the shipped forecast: where a column falls
    back to a naive forecaster, its quantiles keep their offsets from the model's forecast around the naive one.
    None for a model without quantiles."""
    if model.quantile_head is None:
        return None
    batches = model.quantile_batches(windows.context, windows.context_observed, windows.covariates)
    quantiles = torch.cat(list(batches)).cpu()
    return quantiles + (apply(choice, forecasts) - forecasts["model"]).unsqueeze(-1)
