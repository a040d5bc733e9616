"""The classical candidates beside the model: forecasts made from each window's context alone.

Each reads only its window's context (the last observed values, forward-filled, never a later row), so
it forecasts from any origin exactly as it would after the data's end:

- repeat_last: the last observed value;
- seasonal_naive: the last full season, repeated (the frequency's season: 24 hourly, 7 daily, ...);
- drift: the last value plus the context's mean change per step (from its first observed value to its
  last), times the steps ahead;
- seasonal_drift: seasonal naive plus the seasonal drift: the change per step from the context's first
  season to its last, measured between their means, so a season with no trend has none (the endpoints
  of a seasonal series sit at different phases);
- weekly_naive, weekly_drift: the same at one week, for data below a day (168 hourly), where the
  context reaches a week back;
- ets, theta: automatic ETS and the Theta method from statsmodels, fit to each window's context
  (`tsformer.classical`), only where train.candidates names them (`train` does where their fits cost little);
- croston, tsb: Croston's method (SBA) and TSB for intermittent demand, counted from each window's zero
  (`tsformer.intermittent`), only where train.candidates names them (`train`'s note names them for demand
  often zero).

One more, `linear`, is fitted on the training windows rather than read off each context: the model's context
skip alone, fitted by least squares (`tsformer.model.linear_candidate`). A predictor holds it beside its model and
forecasts it there (`Predictor.forecasters`); `candidate_forecasts` makes the others.

The drift is added per step ahead rather than per season back (the distance from the repeated value),
which won on M4 Hourly's validation windows (benchmarks/NOTES.md, "Classical candidates").
"""

from __future__ import annotations

import torch
from pandas.tseries.frequencies import to_offset

from tsformer.classical import CLASSICAL, classical_forecasts
from tsformer.config import CANDIDATE_NAMES
from tsformer.intermittent import INTERMITTENT, intermittent_forecasts
from tsformer.intervals import CHUNK_WINDOWS
from tsformer.metrics import forward_fill, repeat_last, season_length, seasonal_naive, usable_season

CANDIDATES = CANDIDATE_NAMES  # in order of preference on a tie; the config checks train.candidates against them
FITTED = ("linear",)  # fitted on the training windows, held by the predictor (where its model has a context skip)
# every run has these (the weekly ones where they apply)
BUILT_IN = tuple(name for name in CANDIDATES if name not in (*CLASSICAL, *FITTED, *INTERMITTENT))
# what evaluate and backtest score every shipped forecast against, candidates or not (--candidates limits only
# what may ship)
REFERENCE = ("repeat_last", "seasonal_naive")
WEEKLY = ("weekly_naive", "weekly_drift")  # only where the context reaches a week back, below a day
SEASONAL = ("seasonal_naive", "seasonal_drift")  # repeat-last and drift again where the season is 1 (`repeats`)
LABELS = {
    "model": "the model",
    "repeat_last": "repeat-last",
    "seasonal_naive": "seasonal naive",
    "drift": "drift",
    "seasonal_drift": "seasonal naive with drift",
    "weekly_naive": "weekly seasonal naive",
    "weekly_drift": "weekly seasonal naive with drift",
    "linear": "the linear map",
    "ets": "ETS",
    "theta": "Theta",
    "croston": "Croston (SBA)",
    "tsb": "TSB",
}
DAY_NS = 24 * 3600 * 10**9


def season_for(freq: str, context_len: int) -> int:
    """The seasonal-naive period: the frequency's season if the context reaches one season back, else 1."""
    return usable_season(season_length(freq), context_len)


def steps_per_week(freq: str) -> int:
    """Steps in a week for data below a day (168 hourly, 672 every 15 minutes); 0 for a day or longer."""
    try:
        step = to_offset(freq).nanos
    except ValueError:  # calendar offsets (months, business days): a day or longer
        return 0
    return 7 * DAY_NS // step if step < DAY_NS and (7 * DAY_NS) % step == 0 else 0


def week_for(freq: str, context_len: int) -> int:
    """Steps per week for data below a day whose context reaches a week back (168 hourly); 0 otherwise."""
    week = steps_per_week(freq)
    return week if 0 < week <= context_len else 0


def candidate_names(
    freq: str, context_len: int, allowed: tuple[str, ...] = (), linear: bool = False
) -> tuple[str, ...]:
    """The candidates a run with this frequency and context has, in CANDIDATES order: those `allowed`
    (train.candidates) that apply, or, when it names none, the built-in ones that apply; `linear`: whether a
    linear candidate was fitted (without one, `linear` does not apply)."""
    weekly = week_for(freq, context_len) > 0
    chosen = allowed or BUILT_IN
    return tuple(
        name
        for name in CANDIDATES
        if (weekly or name not in WEEKLY) and (linear or name not in FITTED) and name in chosen
    )


def repeats(season: int) -> dict[str, str]:
    """The candidates that repeat others at this season, each to the one it repeats: at season 1 seasonal naive is
    repeat-last and its drift is the drift. The fallback leaves a repeat out where it has the original (a
    forecaster counted twice would weigh twice in its weighted rule); evaluate still reports both."""
    return dict(zip(SEASONAL, ("repeat_last", "drift"), strict=True)) if season == 1 else {}


def candidate_forecasts(
    contexts: torch.Tensor,
    observed: torch.Tensor | None,
    horizon: int,
    season: int,
    week: int = 0,
    classical: tuple[str, ...] = (),
    intermittent: tuple[str, ...] = (),
    zero: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Every built-in candidate's forecast (N, H, C) of contexts (N, L, C), the weekly ones only when `week` > 0,
    those of `classical` (ets, theta: fit per window, so only when asked for) and of `intermittent` (croston,
    tsb), counting demand from each window's `zero` (N, 1, C) scaled (None: no zero, repeat-last). Each window is
    forecast on its own, CHUNK_WINDOWS at a time, so no (N, L, C) copy of all the contexts is made."""
    if zero is None:
        zero = torch.full_like(contexts[:, :1], -torch.inf)
    parts = [
        _block(
            contexts[start : start + CHUNK_WINDOWS],
            None if observed is None else observed[start : start + CHUNK_WINDOWS],
            zero[start : start + CHUNK_WINDOWS],
            horizon,
            season,
            week,
            intermittent,
        )
        for start in range(0, max(len(contexts), 1), CHUNK_WINDOWS)
    ]
    out = parts[0] if len(parts) == 1 else {name: torch.cat([part[name] for part in parts]) for name in parts[0]}
    if classical:  # fit per window anyway, in parallel over all of them
        history = forward_fill(contexts, observed)
        out |= classical_forecasts(history, first_observed(history, observed), horizon, season, classical)
    return out


def _block(
    contexts: torch.Tensor,
    observed: torch.Tensor | None,
    zero: torch.Tensor,
    horizon: int,
    season: int,
    week: int,
    intermittent: tuple[str, ...],
) -> dict[str, torch.Tensor]:
    """The built-in candidates' forecasts (N, H, C) of one block of contexts (N, L, C), and those of
    `intermittent` counted from `zero` (N, 1, C), from one forward fill."""
    history = forward_fill(contexts, observed)
    out = _built_in(history, first_observed(history, observed), horizon, season, week)
    if intermittent:
        out |= intermittent_forecasts(history, observed, zero, horizon, intermittent)
    return out


def _built_in(
    history: torch.Tensor, first: torch.Tensor, horizon: int, season: int, week: int
) -> dict[str, torch.Tensor]:
    """The built-in candidates' forecasts (N, H, C) of forward-filled contexts (N, L, C) whose columns start at
    `first` (N, 1, C)."""
    steps_ahead = torch.arange(1, horizon + 1, dtype=history.dtype, device=history.device).view(1, -1, 1)
    last = repeat_last(history, horizon)
    seasonal = seasonal_naive(history, horizon, season)
    out = {
        "repeat_last": last,
        "seasonal_naive": seasonal,
        "drift": last + steps_ahead * drift_per_step(history, first, 1),  # (N, H, C) each
        "seasonal_drift": seasonal + steps_ahead * drift_per_step(history, first, season),
    }
    if week:
        weekly = seasonal_naive(history, horizon, week)
        out |= {"weekly_naive": weekly, "weekly_drift": weekly + steps_ahead * drift_per_step(history, first, week)}
    return out


def first_observed(history: torch.Tensor, observed: torch.Tensor | None) -> torch.Tensor:
    """(N, 1, C) int64: each column's first observed step in its context (N, L, C); L - 1 when none is."""
    length = history.shape[1]
    if observed is None:
        return torch.zeros_like(history[:, :1], dtype=torch.long)
    steps = torch.arange(length, device=history.device).view(1, -1, 1)  # (1, L, 1)
    first = torch.where(observed, steps, torch.full_like(steps, length)).min(dim=1, keepdim=True).values
    return first.clamp(max=length - 1)


def drift_per_step(history: torch.Tensor, first: torch.Tensor, season: int = 1) -> torch.Tensor:
    """(N, 1, C): the mean change per step of forward-filled contexts (N, L, C) from the mean of the first
    `season` steps after `first` (N, 1, C) to the mean of the last `season` (season 1: first value to last);
    0 where the two stretches start at the same step."""
    length = history.shape[1]
    prefix = torch.cat([torch.zeros_like(history[:, :1]), history.cumsum(dim=1)], dim=1)  # (N, L + 1, C)
    start = first.clamp(max=max(length - season, 0))
    opening = (prefix.gather(1, start + season) - prefix.gather(1, start)) / season  # (N, 1, C)
    closing = (prefix[:, -1:] - prefix[:, -season - 1 : -season]) / season
    span = (length - season - start).to(history.dtype)  # steps between the two stretches' starts
    return torch.where(span > 0, (closing - opening) / span.clamp(min=1), torch.zeros_like(closing))
