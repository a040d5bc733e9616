"""Covariates beside the target: what each token may read of them, and how.

A *past-only* covariate (observed with the target, unknown ahead) is read like the target: token k
sees its values in k's own patch only. A *known-future* covariate (a published load forecast, a
calendar feature) is known up to the end of the forecast, so token k also sees its values over the
`horizon` steps after its patch: the steps that token forecasts, never later ones. A *static*
covariate (a product's category, a meter's size) is one value per series, the same at every step, so
every token may read it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn


class Covariates(NamedTuple):
    """A batch of windows' covariates by role (`tsformer.layout.Layout`); scaled, 0 where a cell is
    unobserved or left padding. A role the model does not read is None."""

    past: torch.Tensor | None = None  # (B, L, n_past): over the context only
    future: torch.Tensor | None = None  # (B, L + H, n_future): over the context and the horizon
    phase: torch.Tensor | None = None  # (B, L + H): each step's phase in the learned cycle (known-future)
    static_values: torch.Tensor | None = None  # (B, n_static_numeric): the window's series' numeric static values
    static_codes: torch.Tensor | None = None  # (B, n_static_categorical) int64: its categories (0 = unseen)

    def rows(self, start: int, end: int, device: torch.device | str) -> Covariates:
        """Windows start..end-1, on `device`."""
        return Covariates(*(None if t is None else t[start:end].to(device) for t in self))

    def from_step(self, offset: int) -> Covariates:
        """From context step `offset` on: what a model reading the context's last L - offset steps is given (the
        steps after the context, the horizon's, stay; the static roles describe the series and stay)."""
        return self._replace(
            past=None if self.past is None else self.past[:, offset:],
            future=None if self.future is None else self.future[:, offset:],
            phase=None if self.phase is None else self.phase[:, offset:],
        )

    def double(self) -> Covariates:
        """Real-valued roles in float64 (the categories stay codes)."""
        return self._replace(**{name: _double(getattr(self, name)) for name in self._fields if name != "static_codes"})


def _double(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.double()


class CovariateEmbedding(nn.Module):
    """Each token's covariates -> d_model, added to its value embedding."""

    def __init__(self, patch_len: int, horizon: int, n_past: int, n_future: int, d_model: int):
        super().__init__()
        self.patch_len, self.horizon = patch_len, horizon
        in_features = patch_len * n_past + (patch_len + horizon) * n_future
        self.linear = nn.Linear(in_features, d_model)
        nn.init.normal_(self.linear.weight, std=1.0 / math.sqrt(in_features))

    def forward(self, covariates: Covariates, pad_len: int, n_tokens: int) -> torch.Tensor:
        """-> (B, T, d_model): token k reads past-only values in its patch, known-future ones in its patch
        and the horizon after it (left padding, to whole patches, is zero)."""
        parts = []
        p = self.patch_len
        if covariates.past is not None:
            past = F.pad(covariates.past, (0, 0, pad_len, 0))  # (B, T*P, n_past)
            b = past.shape[0]
            parts.append(past.view(b, n_tokens, p * past.shape[-1]))  # (B, T, P*n_past): token k's patch
        if covariates.future is not None:
            parts.append(future_windows(covariates.future, pad_len, p, self.horizon).flatten(2))  # (B, T, (P+H)*n_f)
        return self.linear(torch.cat(parts, dim=-1))


def future_windows(future: torch.Tensor, pad_len: int, patch_len: int, horizon: int) -> torch.Tensor:
    """(B, L + H, n_future) -> (B, T, P + H, n_future): each token's patch and the horizon after it."""
    padded = F.pad(future, (0, 0, pad_len, 0))  # (B, T*P + H, n_future)
    return padded.unfold(1, patch_len + horizon, patch_len).transpose(2, 3)  # (B, T, P + H, n_future)


class FutureSkip(nn.Module):
    """A linear map of the known-future covariates over the horizon a token forecasts to that forecast
    (standardised units): the direct path for a covariate that moves the target step by step."""

    def __init__(self, patch_len: int, horizon: int, n_future: int, out_channels: int):
        super().__init__()
        self.patch_len, self.horizon, self.out_channels = patch_len, horizon, out_channels
        self.linear = nn.Linear(horizon * n_future, horizon * out_channels)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, future: torch.Tensor, pad_len: int) -> torch.Tensor:
        """Every token's: future (B, L + H, n_future) -> (B, T, H, out_channels)."""
        ahead = future_windows(future, pad_len, self.patch_len, self.horizon)[:, :, self.patch_len :]  # (B, T, H, f)
        b, t = ahead.shape[:2]
        return self.linear(ahead.flatten(2)).view(b, t, self.horizon, self.out_channels)

    def last(self, future: torch.Tensor) -> torch.Tensor:
        """The last token's only: the horizon after the context, (B, H, out_channels)."""
        b = future.shape[0]
        return self.linear(future[:, -self.horizon :].flatten(1)).view(b, self.horizon, self.out_channels)


class StaticEmbedding(nn.Module):
    """A series' static covariates -> d_model: a linear map of the numeric ones plus one learned vector per
    category of each categorical one (row 0: a category unseen in training), added to every token."""

    def __init__(self, n_numeric: int, cardinalities: tuple[int, ...], d_model: int):
        super().__init__()
        self.numeric = nn.Linear(n_numeric, d_model) if n_numeric else None
        self.categories = nn.ModuleList(nn.Embedding(n + 1, d_model) for n in cardinalities)
        for table in self.categories:
            nn.init.normal_(table.weight, std=1.0 / math.sqrt(d_model))

    def forward(self, values: torch.Tensor | None, codes: torch.Tensor | None) -> torch.Tensor:
        """values (B, n_numeric), codes (B, n_categorical) int64 -> (B, d_model)."""
        parts = [] if self.numeric is None else [self.numeric(values)]
        parts += [table(codes[:, j]) for j, table in enumerate(self.categories)]
        return torch.stack(parts).sum(0)
