"""Input side of the model: X = projection(values) + PE."""

from __future__ import annotations

import math

import torch
from torch import nn


def sinusoidal_encoding(n_positions: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)); (n_positions, d_model)."""
    position = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)  # (n_positions, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d/2),)
    angle = position / torch.pow(10000.0, two_i / d_model)  # (n_positions, ceil(d/2))
    encoding = torch.zeros(n_positions, d_model, dtype=torch.float64)
    encoding[:, 0::2] = torch.sin(angle)
    encoding[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return encoding.float()


class PatchProjection(nn.Module):
    """The numeric "embedding": each token's patch values and their padding mask -> d_model.

    Pad steps are zeroed and flagged, so whatever value sat in a pad slot cannot reach the output.
    """

    def __init__(self, patch_len: int, n_channels: int, d_model: int, n_extra: int = 0):
        super().__init__()
        self.in_features = patch_len * (n_channels + 1) + n_extra
        self.linear = nn.Linear(self.in_features, d_model)
        nn.init.normal_(self.linear.weight, std=1.0 / math.sqrt(self.in_features))

    def forward(
        self, patches: torch.Tensor, patch_mask: torch.Tensor, extra: torch.Tensor | None = None
    ) -> torch.Tensor:
        """patches (N, T, P, c), patch_mask (N, T, P) bool, extra (N, T, n_extra) -> (N, T, d_model)."""
        n, t, p, c = patches.shape
        real = patch_mask.to(patches.dtype)
        values = (patches * real.unsqueeze(-1)).reshape(n, t, p * c)  # (N, T, P*c)
        features = [values, real] if extra is None else [values, real, extra]
        return self.linear(torch.cat(features, dim=-1))  # (N, T, d_model)
