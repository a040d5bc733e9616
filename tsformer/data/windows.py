"""The scaled inputs of every row by role, and windows of them: sampled lazily, gathered in batches.

A window is a (series, end) pair: window i forecasts rows starts[i]..starts[i] + horizon - 1 from the
context_len rows before, and rows before its series' first row (floors[i]) are left padding, masked
as unobserved. Windows are gathered by indexing (or, when consecutive and unpadded, as views through
`unfold`), never by a Python loop per window.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from tsformer.data.split import split_window
from tsformer.model.covariates import Covariates

ROLES = ("target", "past", "future", "phase")  # the time-indexed roles, (n_rows, ...) each
STATIC_ROLES = ("static_values", "static_codes")  # one row per series


class Split(NamedTuple):
    """Windows cut at their forecast origin: what the model reads and what it must forecast."""

    context: torch.Tensor  # (N, L, C) targets before the origin
    target: torch.Tensor  # (N, H, C) targets after it
    context_observed: torch.Tensor | None  # (N, L, C) bool; None: every cell observed
    target_observed: torch.Tensor | None  # (N, H, C) bool
    covariates: Covariates | None  # by role: past-only over the context, known-future over context and horizon


@dataclass(frozen=True)
class Windows:
    """A batch of windows (materialised, or views of the scaled inputs), each role (n_windows, L + H, ...) or,
    for the static ones, (n_windows, ...); a role the layout does not have is None."""

    target: torch.Tensor  # (B, L + H, C)
    observed: torch.Tensor | None  # (B, L + H, C) bool, False on unobserved cells and padding; None: all observed
    # (decided by the windows' own cells, so a cell missing in later rows changes nothing before it)
    past: torch.Tensor | None = None  # (B, L + H, n_past): only the context is ever handed on
    future: torch.Tensor | None = None  # (B, L + H, n_future)
    phase: torch.Tensor | None = None  # (B, L + H)
    static_values: torch.Tensor | None = None  # (B, n_static_numeric)
    static_codes: torch.Tensor | None = None  # (B, n_static_categorical)

    def __len__(self) -> int:
        return len(self.target)

    def split(self, context_len: int) -> Split:
        """Targets before and after the origin, their masks, and each covariate role over the steps it may be
        read: past-only over the context, known-future (and the phase) over the context and horizon."""
        contexts, targets = split_window(self.target, context_len)
        roles = {
            "past": None if self.past is None else self.past[:, :context_len],  # never after the origin
            "future": self.future,
            "phase": self.phase,
            "static_values": self.static_values,
            "static_codes": self.static_codes,
        }
        covariates = Covariates(**roles) if any(t is not None for t in roles.values()) else None
        if self.observed is None:
            return Split(contexts, targets, None, None, covariates)
        return Split(contexts, targets, *split_window(self.observed, context_len), covariates)


@dataclass(frozen=True)
class SeriesInputs:
    """The scaled inputs of every row by role (`tsformer.layout.Layout`), stacked series after series (series i
    owns rows bounds[i]:bounds[i + 1]); a role the layout does not have is None."""

    target: torch.Tensor  # (n_rows, C) float32, standardised with the train-only scaler; 0 where unobserved
    observed: torch.Tensor | None  # (n_rows, C) bool, False where a target cell is unobserved; None: all observed
    bounds: np.ndarray  # (n_ids + 1,) int64
    past: torch.Tensor | None = None  # (n_rows, n_past) standardised; 0 where missing
    future: torch.Tensor | None = None  # (n_rows, n_future): the data's known-future covariates (standardised), then
    # the calendar features (as they are)
    phase: torch.Tensor | None = None  # (n_rows,) float32: each step's phase in the learned cycle
    static_values: torch.Tensor | None = None  # (n_ids, n_static_numeric) float32, standardised over the series
    static_codes: torch.Tensor | None = None  # (n_ids, n_static_categorical) int64

    def series_of(self, floors: torch.Tensor) -> torch.Tensor:
        """(n,) the index of the series whose first row is each of `floors`."""
        return torch.from_numpy(np.searchsorted(self.bounds, floors.numpy(), side="right") - 1)

    def gather(
        self, starts: torch.Tensor, floors: torch.Tensor, context_len: int, horizon: int, device="cpu"
    ) -> Windows:
        """The windows whose first target row is each of `starts` (B,) in the series starting at `floors` (B,),
        on `device`; rows before a series' first row are padding (zero, and masked as unobserved)."""
        offsets = torch.arange(-context_len, horizon)  # (L + H,)
        rows = starts[:, None] + offsets  # (B, L + H)
        real = rows >= floors[:, None]  # (B, L + H): False on left padding
        rows = torch.maximum(rows, floors[:, None])
        padded = not bool(real.all())

        def take(block: torch.Tensor | None) -> torch.Tensor | None:
            if block is None:
                return None
            values = block[rows]  # (B, L + H, ...)
            if padded:
                cells = real.view(*real.shape, *[1] * (values.dim() - 2))
                values = torch.where(cells, values, torch.zeros((), dtype=values.dtype))
            return values.to(device)

        observed = None if self.observed is None else self.observed[rows]  # (B, L + H, C)
        if padded:
            cells = real.unsqueeze(-1).expand(-1, -1, self.target.shape[1])
            observed = cells if observed is None else observed & cells
        if observed is not None and bool(observed.all()):  # as for data with no cell missing (see `unfold`)
            observed = None
        return Windows(
            take(self.target),
            None if observed is None else observed.to(device),
            **{role: take(getattr(self, role)) for role in ROLES[1:]},
            **self._static(floors, device),
        )

    def unfold(self, starts: np.ndarray, floors: torch.Tensor, context_len: int, horizon: int) -> Windows:
        """Windows with consecutive, unpadded `starts` as views of the inputs (no copy): (N, L + H, ...) each."""
        roles = {role: _unfolded(getattr(self, role), starts, context_len, horizon) for role in ROLES}
        observed = self.observed
        if (
            observed is not None
            and len(starts)
            and bool(observed[starts[0] - context_len : starts[-1] + horizon].all())
        ):
            observed = None  # windows with every cell observed take one path whatever other rows miss
        return Windows(
            roles.pop("target"),
            _unfolded(observed, starts, context_len, horizon),
            **roles,
            **self._static(floors, "cpu"),
        )

    def _static(self, floors: torch.Tensor, device) -> dict[str, torch.Tensor | None]:
        """The static roles of the windows whose series start at `floors`."""
        if self.static_values is None and self.static_codes is None:
            return {}
        series = self.series_of(floors)
        return {
            role: None if getattr(self, role) is None else getattr(self, role)[series].to(device)
            for role in STATIC_ROLES
        }

    def row_numbers(self) -> SeriesInputs:
        """The same layout with every time-indexed cell holding its row number and every static cell its series'
        index (float64, codes int64): windows gathered from it show which rows and series each role read."""

        def numbered(block: torch.Tensor | None, numbers: torch.Tensor) -> torch.Tensor | None:
            if block is None:
                return None
            numbers = numbers if block.dtype.is_floating_point else numbers.long()
            return numbers.view(-1, *[1] * (block.dim() - 1)).expand(block.shape)  # a view: no copy

        rows = torch.arange(len(self.target), dtype=torch.float64)
        series = torch.arange(len(self.bounds) - 1, dtype=torch.float64)
        return dataclasses.replace(
            self,
            observed=None,
            **{role: numbered(getattr(self, role), rows) for role in ROLES},
            **{role: numbered(getattr(self, role), series) for role in STATIC_ROLES},
        )


def _unfolded(block: torch.Tensor | None, starts: np.ndarray, context_len: int, horizon: int) -> torch.Tensor | None:
    """Stride-1 windows of `block` (n_rows, ...) as a view: (n_windows, L + H, ...); `starts` consecutive."""
    if block is None:
        return None
    if len(starts) == 0:
        return block.new_empty((0, context_len + horizon, *block.shape[1:]))
    span = block[int(starts[0]) - context_len : int(starts[-1]) + horizon]  # (rows, ...)
    windows = span.unfold(0, context_len + horizon, 1)  # (n_windows, ..., L + H)
    return windows if block.dim() == 1 else windows.movedim(-1, 1)  # (n_windows, L + H, ...)


@dataclass(frozen=True)
class WindowIndex:
    """Where the windows of one split are, sampled lazily from the scaled inputs (never all materialised)."""

    inputs: SeriesInputs
    starts: torch.Tensor  # (n_windows,) int64: each window's first target row
    floors: torch.Tensor  # (n_windows,) int64: its series' first row
    context_len: int
    horizon: int

    def __len__(self) -> int:
        return len(self.starts)

    def every(self, stride: int) -> WindowIndex:
        """Every `stride`-th window."""
        return dataclasses.replace(self, starts=self.starts[::stride], floors=self.floors[::stride])

    def subset(self, index: torch.Tensor) -> WindowIndex:
        """The windows at `index`, still lazy."""
        return dataclasses.replace(self, starts=self.starts[index], floors=self.floors[index])

    @property
    def n_series(self) -> int:
        """How many series the inputs hold (not all need windows here)."""
        return len(self.inputs.bounds) - 1

    def series(self) -> np.ndarray:
        """(n_windows,) the index of each window's series."""
        return self.inputs.series_of(self.floors).numpy()

    def epoch_draw(self, budget: int, generator: torch.Generator) -> torch.Tensor:
        """An epoch's windows in a random order: all of them, or `budget` drawn uniformly over series.

        Each series gives the same number of windows (one more for some series, drawn at random, where `budget`
        does not divide evenly), a series with fewer gives all of its own and the rest is shared among the
        others, so every series is in every epoch once `budget` reaches the number of series. With one series
        (a wide file) this is the first `budget` of the random order.
        """
        order = torch.randperm(len(self), generator=generator)
        if budget >= len(order):
            return order
        _, series = torch.unique(self.floors[order], return_inverse=True)  # a series' first row names it
        grouped = torch.argsort(series, stable=True)  # positions in `order`, by series, in random order within
        first = torch.ones(len(order), dtype=torch.bool)
        first[1:] = series[grouped][1:] != series[grouped][:-1]
        position = torch.arange(len(order))
        rank = torch.empty_like(position)
        rank[grouped] = position - position[first][torch.cumsum(first, 0) - 1]  # its place within its series
        n_series = int(series.max()) + 1
        turn = torch.randperm(n_series, generator=generator)[series]  # the series' order within each rank
        chosen = torch.argsort(rank * n_series + turn)[:budget]  # every series' first, then every second, ...
        return order[chosen.sort().values]

    def take(self, index: torch.Tensor, device: torch.device | str = "cpu") -> Windows:
        """The windows at `index` (a batch), gathered, on `device`."""
        return self.inputs.gather(self.starts[index], self.floors[index], self.context_len, self.horizon, device)

    def all(self) -> Windows:
        """Every window: views of the scaled inputs when they are consecutive and unpadded, else gathered."""
        starts = self.starts.numpy()
        unpadded = bool((self.starts - self.context_len >= self.floors).all())
        if len(starts) and unpadded and np.all(np.diff(starts) == 1):
            return self.inputs.unfold(starts, self.floors, self.context_len, self.horizon)
        return self.inputs.gather(self.starts, self.floors, self.context_len, self.horizon)

    def split(self, context_len: int) -> Split:
        return self.all().split(context_len)
