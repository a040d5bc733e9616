"""Croston (SBA) and TSB: the intermittent-demand candidates `croston` and `tsb`, read off each window's context.

Demand that is often zero (a slow-moving product, a rare event) defeats repeat-last: after a single sale it repeats
the sale for the whole horizon. The field's answer forecasts a rate from two smoothed quantities:

- croston: Croston's method with the Syntetos-Boylan bias correction (SBA): simple exponential smoothing
  (ALPHA) of the nonzero demand sizes and, apart, of the intervals between them; the forecast is
  (1 - ALPHA / 2) x size / interval, flat over the horizon;
- tsb: Teunter-Syntetos-Babai: the smoothed size (ALPHA) times a demand probability smoothed every step (ALPHA),
  so a product that stops selling fades, where Croston's rate waits for the next sale.

Both smooth from the first value, as statsforecast's CrostonSBA and TSB do (on contexts without gaps, equal to
theirs to rounding: benchmarks/NOTES.md, session 51). Written here (a loop over the context's steps,
vectorised over windows and columns) as statsmodels has neither and statsforecast pins pandas below 3
(`tsformer.classical`).

Each reads only its window's context. Demand is measured from each window's zero in scaled units (the value
0 of its series, `Scaler.floors`), so a forecast in scaled units is the method's forecast of the raw counts,
scaled; a column with no floor at zero (data.floor) has no zero to count from and gets repeat-last there (train
leaves the candidates out for such data, with a note). Unobserved steps are skipped, neither demand nor a zero
(nor a step of an interval: a gap's sales are unknown).

They are candidates only where train.candidates names them: on seven intermittent data sets (benchmarks/NOTES.md,
session 51) they moved no choice, or lost the weighted rule's nested validation score.
"""

from __future__ import annotations

import torch

INTERMITTENT = ("croston", "tsb")
ALPHA = 0.1  # the smoothing of sizes, intervals and the demand probability: Croston's and statsforecast's fixed 0.1
SBA_FACTOR = 1 - ALPHA / 2  # Syntetos and Boylan's correction of Croston's upward bias
# a scaled value counts as zero within this many float32 roundings of the zero's size (a 0 in the data scales to the
# zero's exact bits; the allowance is for arithmetic on the way, never a real demand: a sale of 1 in a series of
# scale 30,000 stands 3e-5 above its zero)
ZERO_ROUNDINGS = 4


def near_zero(values: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    """Bool, where scaled `values` are the value 0 of their series, `zero` (broadcast), to float32 rounding."""
    tolerance = ZERO_ROUNDINGS * torch.finfo(torch.float32).eps * zero.abs().clamp(min=1.0)
    return (values - zero).abs() <= tolerance


def intermittent_forecasts(
    history: torch.Tensor,
    observed: torch.Tensor | None,
    zero: torch.Tensor,
    horizon: int,
    names: tuple[str, ...] = INTERMITTENT,
) -> dict[str, torch.Tensor]:
    """Each of `names` (of INTERMITTENT) forecasting (N, H, C) from forward-filled contexts `history` (N, L, C)
    (`observed` (N, L, C) bool, or None where every step is), counting demand above `zero` (N, 1, C) scaled; where
    `zero` is not finite, the last value."""
    counted = torch.isfinite(zero)  # (N, 1, C)
    base = torch.where(counted, zero, torch.zeros_like(zero))  # (N, 1, C)
    demand = torch.where(near_zero(history, base), 0.0, (history - base).clamp(min=0))  # (N, L, C)
    if observed is None:
        observed = torch.ones_like(history, dtype=torch.bool)
    size, interval, probability = _smoothed(demand, observed)  # (N, C) each
    rates = {
        "croston": torch.where(interval > 0, SBA_FACTOR * size / interval.clamp(min=1), torch.zeros_like(size)),
        "tsb": probability * size,
    }
    last = history[:, -1]  # (N, C)
    out = {}
    for name in names:
        point = torch.where(counted[:, 0], zero[:, 0] + rates[name], last)  # (N, C)
        out[name] = point.unsqueeze(1).expand(-1, horizon, -1)  # (N, H, C)
    return out


def _smoothed(demand: torch.Tensor, observed: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Over demand (N, L, C) >= 0, step by step: the smoothed nonzero size, the smoothed interval between demands
    (0 where none occurred) and the smoothed probability of a demand, (N, C) each at the context's end."""
    n, length, columns = demand.shape
    size = torch.zeros(n, columns, dtype=demand.dtype, device=demand.device)
    interval = torch.zeros_like(size)
    probability = torch.zeros_like(size)
    since = torch.zeros_like(size)  # observed steps since the last demand, this one included
    sizes_seen = torch.zeros_like(size, dtype=torch.bool)
    steps_seen = torch.zeros_like(sizes_seen)
    for t in range(length):
        seen = observed[:, t]
        value = demand[:, t]
        occurred = seen & (value > 0)
        since = since + seen.to(since.dtype)
        # each smoothed quantity starts at its first value and moves ALPHA of the way to each later one
        size = torch.where(occurred, torch.where(sizes_seen, size + ALPHA * (value - size), value), size)
        interval = torch.where(
            occurred, torch.where(sizes_seen, interval + ALPHA * (since - interval), since), interval
        )
        event = occurred.to(probability.dtype)
        probability = torch.where(
            seen, torch.where(steps_seen, probability + ALPHA * (event - probability), event), probability
        )
        sizes_seen |= occurred
        steps_seen |= seen
        since = torch.where(occurred, torch.zeros_like(since), since)
    return size, interval, probability
