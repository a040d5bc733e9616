"""An ensemble: the mean forecast of several Forecasters of one horizon and patch, each drawn from its own initial
weights and trained on its own loss (seed averaging, trained side by side), each reading the last `context_len`
steps of the ensemble's context (members of different contexts, or all of the same one)."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from tsformer.config import ModelConfig
from tsformer.layout import Layout
from tsformer.model.covariates import Covariates
from tsformer.model.forecaster import Forecaster
from tsformer.model.inference import ForecasterBase


class Ensemble(ForecasterBase):
    """Reads like one Forecaster of the longest member's context: every output is the mean of the members'
    (quantiles stay sorted, as a mean of sorted vectors is sorted); the training loss is the mean of the
    members' own losses, so each member learns alone and the ensemble averages independent errors.

    A member of a shorter context reads the last steps of the context. Its tokens end where the longest member's
    last ones end (every token ends a whole number of patches before the context's end), so it trains on the
    suffix of the ensemble's token targets (`member_targets`), and an earlier token's forecast is the mean of the
    members that reach back to it.
    """

    def __init__(self, members: list[Forecaster]):
        super().__init__()
        self.members = nn.ModuleList(members)
        contexts = tuple(m.cfg.context_len for m in members)
        longest = members[0]
        if contexts != tuple(sorted(contexts, reverse=True)):
            raise ValueError(f"an ensemble's members come longest context first, got {list(contexts)}")
        if any((m.cfg.patch_len, m.cfg.horizon) != (longest.cfg.patch_len, longest.cfg.horizon) for m in members):
            raise ValueError("an ensemble's members must share model.patch_len and model.horizon")
        self.cfg = dataclasses.replace(
            longest.cfg, members=len(members), member_contexts=contexts if len(set(contexts)) > 1 else ()
        )
        self.layout, self.n_series = longest.layout, longest.n_series
        self.n_past, self.n_future, self.n_tokens = longest.n_past, longest.n_future, longest.n_tokens
        self.offsets = [self.cfg.context_len - c for c in contexts]  # the context steps each member skips

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

    def member_targets(self, targets: torch.Tensor) -> list[torch.Tensor]:
        """Each member's token targets from the ensemble's (B, T, H, ...): the last n_tokens of each member."""
        return [targets[:, self.n_tokens - m.n_tokens :] for m in self.members]

    def _inputs(self, x: torch.Tensor, observed: torch.Tensor | None, covariates: Covariates | None):
        """Each member's (context, observed, covariates): the last steps of the ensemble's that it reads."""
        for member, offset in zip(self.members, self.offsets, strict=True):
            if not offset:
                yield member, x, observed, covariates
                continue
            cut = None if covariates is None else covariates.from_step(offset)
            yield member, x[:, offset:], None if observed is None else observed[:, offset:], cut

    def outputs_tokens(
        self, x: torch.Tensor, observed: torch.Tensor | None = None, covariates: Covariates | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Every token's mean forecast (B, T, H, C) and mean quantiles (B, T, H, C, Q) or None, each token's over
        the members whose context reaches it."""
        total_point = total_quantiles = None
        count = x.new_zeros(self.n_tokens)  # (T,) members reaching each token
        for member, *inputs in self._inputs(x, observed, covariates):
            point, quantiles = member.outputs_tokens(*inputs)  # (B, T_i, H, C), (B, T_i, H, C, Q) or None
            first = self.n_tokens - member.n_tokens
            count[first:] += 1
            total_point = _add_suffix(total_point, point, self.n_tokens)
            if quantiles is not None:
                total_quantiles = _add_suffix(total_quantiles, quantiles, self.n_tokens)
        share = count.view(1, -1, 1, 1)  # (1, T, 1, 1)
        mean_quantiles = None if total_quantiles is None else total_quantiles / share.unsqueeze(-1)
        return total_point / share, mean_quantiles

    def outputs_last(
        self, x: torch.Tensor, observed: torch.Tensor | None = None, covariates: Covariates | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The last token's mean forecast (B, H, C) and mean quantiles (B, H, C, Q) or None."""
        return _mean([member.outputs_last(*inputs) for member, *inputs in self._inputs(x, observed, covariates)])

    def forward(
        self,
        x: torch.Tensor,
        observed: torch.Tensor | None = None,
        target: torch.Tensor | None = None,
        target_observed: torch.Tensor | None = None,
        covariates: Covariates | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """-> (mean forecast (B, H, C), mean of the members' losses or None), as `Forecaster.forward`; a target
        of every token (B, T, H, C) gives each member its own tokens' (`member_targets`)."""
        if target is None:
            return self.forecast_last(x, observed, covariates), None
        n = len(self.members)
        targets, observed_targets = [target] * n, [target_observed] * n
        if target.dim() == 4:
            targets = self.member_targets(target)
            if target_observed is not None:
                observed_targets = self.member_targets(target_observed)
        outputs = [
            member(*inputs[:2], member_target, member_observed, inputs[2])
            for (member, *inputs), member_target, member_observed in zip(
                self._inputs(x, observed, covariates), targets, observed_targets, strict=True
            )
        ]
        forecasts, losses = zip(*outputs, strict=True)  # each member's (forecast, loss)
        return torch.stack(forecasts).mean(0), torch.stack(losses).mean()


def _add_suffix(total: torch.Tensor | None, part: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """total (B, T, ...) plus part (B, T_i, ...) on its last T_i tokens (total None: zeros)."""
    if total is None:
        total = part.new_zeros(part.shape[0], n_tokens, *part.shape[2:])
    return torch.cat([total[:, : n_tokens - part.shape[1]], total[:, n_tokens - part.shape[1] :] + part], dim=1)


def _mean(outputs: list[tuple[torch.Tensor, torch.Tensor | None]]) -> tuple[torch.Tensor, torch.Tensor | None]:
    point = torch.stack([p for p, _ in outputs]).mean(0)
    if outputs[0][1] is None:
        return point, None
    return point, torch.stack([q for _, q in outputs]).mean(0)


def build_forecaster(
    cfg: ModelConfig, layout: Layout, loss: str = "mse", quantiles: tuple[float, ...] = ()
) -> Forecaster | Ensemble:
    """One Forecaster reading `layout`, or an Ensemble of `cfg.members` of them (one for an unresolved 0), each of
    its context in `cfg.contexts`, drawn one after another from the RNG."""
    members = [
        Forecaster(dataclasses.replace(cfg, context_len=context, member_contexts=()), layout, loss, quantiles)
        for context in cfg.contexts
    ]
    return members[0] if len(members) == 1 else Ensemble(members)
