"""Causal instance normalisation: each token's statistics use only steps at or before its end."""

from __future__ import annotations

import torch

EPS = 1e-5


def instance_stats(values: torch.Tensor, mask: torch.Tensor, patch_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token mean and std, (N, T, c) each, from values (N, T*P, c) and mask (N, T*P) bool.

    The statistics of all real steps up to the end of each token (running, prefix statistics).
    """
    steps = values.shape[1]
    real = mask.to(values.dtype).unsqueeze(-1)  # (N, T*P, 1)
    ends = torch.arange(patch_len - 1, steps, patch_len, device=values.device)  # last step of each token
    count = real.cumsum(1)[:, ends].clamp(min=1.0)  # (N, T, 1)
    total = (values * real).cumsum(1)[:, ends]  # (N, T, c)
    total_sq = (values.square() * real).cumsum(1)[:, ends]  # (N, T, c)
    mean = total / count
    var = (total_sq / count - mean.square()).clamp(min=0.0)
    return mean, torch.sqrt(var + EPS)
