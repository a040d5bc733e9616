"""Causal instance normalisation: each token's statistics use only steps at or before its end."""

from __future__ import annotations

import torch

EPS = 1e-5


def instance_stats(
    values: torch.Tensor, mask: torch.Tensor, patch_len: int, norm: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token mean and std, (N, T, c) each, from values (N, T*P, c) and mask (N, T*P) bool.

    prefix: statistics of all real steps up to the end of each token (running statistics).
    first_patch: every token uses the statistics of the first token holding real steps.
    none: mean 0, std 1.
    """
    n, steps, c = values.shape
    n_tokens = steps // patch_len
    if norm == "none":
        zeros = values.new_zeros(n, n_tokens, c)
        return zeros, zeros + 1.0
    real = mask.to(values.dtype).unsqueeze(-1)  # (N, T*P, 1)
    ends = torch.arange(patch_len - 1, steps, patch_len, device=values.device)  # last step of each token
    count = real.cumsum(1)[:, ends]  # (N, T, 1)
    total = (values * real).cumsum(1)[:, ends]  # (N, T, c)
    total_sq = (values.square() * real).cumsum(1)[:, ends]  # (N, T, c)
    if norm == "first_patch":
        first = (count[..., 0] > 0).int().argmax(1)  # (N,) first token with a real step
        token = torch.arange(n_tokens, device=values.device)[None, :]  # (1, T)
        take = torch.where(token >= first[:, None], first[:, None], token)  # (N, T), never a later token
        count = count.gather(1, take.unsqueeze(-1))
        total = total.gather(1, take.unsqueeze(-1).expand(-1, -1, c))
        total_sq = total_sq.gather(1, take.unsqueeze(-1).expand(-1, -1, c))
    elif norm != "prefix":
        raise ValueError(f"unknown norm {norm!r}")
    count = count.clamp(min=1.0)
    mean = total / count
    var = (total_sq / count - mean.square()).clamp(min=0.0)
    return mean, torch.sqrt(var + EPS)
