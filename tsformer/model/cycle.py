"""A learned cycle (CycleNet's residual cycle): one value per phase and series column.

The phase of every step, context and horizon alike, comes from its timestamp (the calendar column
`cycle{n}_phase`), so it is a known-future input: token k reads the phases of its own patch and of
the `horizon` steps it forecasts, never a later one, and never a value.
"""

from __future__ import annotations

import torch
from torch import nn


class Cycle(nn.Module):
    """Q (period, C), zero at the start: the cycle is removed from the inputs and added to the forecast."""

    def __init__(self, period: int, n_series: int):
        super().__init__()
        self.period = period
        self.values = nn.Parameter(torch.zeros(period, n_series))

    def forward(self, phase: torch.Tensor) -> torch.Tensor:
        """phase (...) real (rounded, then taken modulo the period) -> the cycle there, (..., C).

        `index_select`, whose gradient adds in a fixed order: indexing's accumulates in an order that varies with
        the threads, so two runs with the same seed would differ in the last bits."""
        index = torch.remainder(phase.round().long(), self.period)
        return self.values.index_select(0, index.reshape(-1)).view(*index.shape, self.values.shape[1])
