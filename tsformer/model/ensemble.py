"""An ensemble: the mean forecast of several Forecasters of one shape, each drawn from its own
initial weights and trained on its own loss (seed averaging, trained side by side)."""

from __future__ import annotations

import torch
from torch import nn

from tsformer.config import ModelConfig
from tsformer.layout import Layout
from tsformer.model.covariates import Covariates
from tsformer.model.forecaster import Forecaster
from tsformer.model.inference import ForecasterBase


class Ensemble(ForecasterBase):
    """Reads like one Forecaster: every output is the mean of the members' (quantiles stay sorted, as a
    mean of sorted vectors is sorted); the training loss is the mean of the members' own losses, so each
    member learns alone and the ensemble averages independent errors."""

    def __init__(self, members: list[Forecaster]):
        super().__init__()
        self.members = nn.ModuleList(members)
        first = members[0]
        self.cfg, self.layout, self.n_series = first.cfg, first.layout, first.n_series
        self.n_past, self.n_future, self.n_tokens = first.n_past, first.n_future, first.n_tokens

    @property
    def positional_encoding(self) -> torch.Tensor:
        return self.members[0].positional_encoding

    @property
    def quantile_levels(self) -> torch.Tensor:
        return self.members[0].quantile_levels

    @property
    def quantile_head(self) -> nn.Module | None:
        return self.members[0].quantile_head

    def token_ends(self) -> list[int]:
        return self.members[0].token_ends()

    def token_targets(self, window: torch.Tensor) -> torch.Tensor:
        return self.members[0].token_targets(window)

    def outputs_tokens(
        self, x: torch.Tensor, observed: torch.Tensor | None = None, covariates: Covariates | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Every token's mean forecast (B, T, H, C) and mean quantiles (B, T, H, C, Q) or None."""
        return _mean([m.outputs_tokens(x, observed, covariates) for m in self.members])

    def outputs_last(
        self, x: torch.Tensor, observed: torch.Tensor | None = None, covariates: Covariates | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The last token's mean forecast (B, H, C) and mean quantiles (B, H, C, Q) or None."""
        return _mean([m.outputs_last(x, observed, covariates) for m in self.members])

    def forward(
        self,
        x: torch.Tensor,
        observed: torch.Tensor | None = None,
        target: torch.Tensor | None = None,
        target_observed: torch.Tensor | None = None,
        covariates: Covariates | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """-> (mean forecast (B, H, C), mean of the members' losses or None), as `Forecaster.forward`."""
        if target is None:
            return self.forecast_last(x, observed, covariates), None
        outputs = [m(x, observed, target, target_observed, covariates) for m in self.members]
        forecasts, losses = zip(*outputs, strict=True)  # each member's (forecast, loss)
        return torch.stack(forecasts).mean(0), torch.stack(losses).mean()


def _mean(outputs: list[tuple[torch.Tensor, torch.Tensor | None]]) -> tuple[torch.Tensor, torch.Tensor | None]:
    point = torch.stack([p for p, _ in outputs]).mean(0)
    if outputs[0][1] is None:
        return point, None
    return point, torch.stack([q for _, q in outputs]).mean(0)


def build_forecaster(
    cfg: ModelConfig, layout: Layout, loss: str = "mse", quantiles: tuple[float, ...] = ()
) -> Forecaster | Ensemble:
    """One Forecaster reading `layout`, or an Ensemble of `cfg.members` of them drawn one after another from
    the RNG (one for an unresolved 0)."""
    members = [Forecaster(cfg, layout, loss, quantiles) for _ in range(max(1, cfg.members))]
    return members[0] if len(members) == 1 else Ensemble(members)
