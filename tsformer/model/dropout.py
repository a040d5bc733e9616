"""Inverted dropout whose mask comes from 16 random bits an element.

Each unit is kept with probability 1 - p and scaled by 1 / (1 - p), as in `nn.Dropout`, with p rounded to a
multiple of 1/65536. The mask is drawn as 64-bit random words cut into four 16-bit integers each, so one
generator call serves four elements. On the CPU build this project pins, `nn.Dropout`'s `bernoulli_` goes
through MKL and took a quarter of a training step; the M4 Hourly model's step trains about 1.5 times as many
windows a second this way (benchmarks/NOTES.md, session 22).
"""

from __future__ import annotations

import torch
from torch import nn

LEVELS = 2**16  # the values of an int16 draw; p is rounded to a multiple of 1 / LEVELS


def keep_mask(shape: torch.Size, p: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """1 / (1 - q) where an element is kept, 0 where it is dropped (with probability q = round(p * LEVELS) / LEVELS)."""
    n = shape.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(2**63), None)  # every bit random
    draws = words.view(torch.int16)[:n].view(shape)  # uniform over [-32768, 32767], four an int64 word
    dropped = round(p * LEVELS)  # how many of the LEVELS values drop an element
    return (draws >= dropped - LEVELS // 2).to(dtype).mul_(LEVELS / (LEVELS - dropped))


class Dropout(nn.Module):
    """Zeroes each element with probability p in training and scales the rest by 1 / (1 - p); identity in eval."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        return x * keep_mask(x.shape, self.p, x.dtype, x.device)

    def extra_repr(self) -> str:
        return f"p={self.p}"
