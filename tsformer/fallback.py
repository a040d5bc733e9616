"""Never worse than a classical forecaster on validation: per series and column, the forecast is the
model's, a candidate's (`tsformer.candidates`: repeat-last, seasonal naive, drift, ...), or a blend: the
mean of the model's forecast and a candidate's.

At the end of training the model, the candidates and the blends are scored on the validation windows
only; each column of each series (one series for a wide file) keeps the forecaster with the lowest MSE
there (the model on a tie, or without a validation window; then the first in FORECASTERS order). MSE on
each series' standardised values: the forecasters are compared within a series, so its scale cancels.
The choice is stored in the Predictor, whose forecasts apply it (`Predictor.forecast`). The test split
is never used for it. The blends were adopted, and MSE kept over MAE (MASE up to each series' constant),
on validation alone: choosing on M4 Hourly's first two thirds of validation origins and scoring the
last third (benchmarks/NOTES.md, "Blends").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tsformer.candidates import CANDIDATES
from tsformer.candidates import LABELS as CANDIDATE_LABELS

BLENDS = {f"blend_{name}": name for name in CANDIDATES}  # the blend -> its candidate, blended with the model
FORECASTERS = ("model", *CANDIDATES, *BLENDS)  # in order of preference on a tie
LABELS = {**CANDIDATE_LABELS, **{blend: f"the model blended with {CANDIDATE_LABELS[c]}" for blend, c in BLENDS.items()}}


def forecast_of(name: str, forecasts: dict[str, torch.Tensor]) -> torch.Tensor:
    """(N, H, C) the forecast of `name`: one of `forecasts` (the model's and the candidates'), or a blend: the
    mean of the model's and its candidate's."""
    if name in BLENDS:
        return 0.5 * (forecasts["model"] + forecasts[BLENDS[name]])
    return forecasts[name]


def scored_names(forecasts: dict[str, torch.Tensor]) -> tuple[str, ...]:
    """The forecasters the fallback chooses among, given the model's and some candidates' forecasts."""
    return tuple(name for name in FORECASTERS if name in forecasts or BLENDS.get(name) in forecasts)


@dataclass(frozen=True)
class Decision:
    columns: tuple[str, ...]
    choice: tuple[tuple[str, ...], ...]  # per series, per column: one of FORECASTERS (one series for a wide file)
    val_error: dict[str, np.ndarray]  # forecaster -> (n_series, C) validation MSE or MAE (NaN: no validation window)
    metric: str = "mse"  # train.selection_metric: how validation errors were averaged

    @property
    def names(self) -> tuple[str, ...]:
        """The forecasters scored, the model first."""
        return tuple(self.val_error)

    def lines(self) -> list[str]:
        """One line per column: what each scored on validation and what is used (per series: how often)."""
        out = []
        for j, column in enumerate(self.columns):
            mse = {name: _mean_observed(self.val_error[name][:, j]) for name in self.names}
            others = [name for name in self.names[1:] if name not in BLENDS] or self.names[1:]
            best_naive = min(others, key=lambda name: mse[name])
            scores = f"{column}: model {mse['model']:.4g} vs {LABELS[best_naive]} {mse[best_naive]:.4g} on validation"
            scores += " MAE" if self.metric == "mae" else ""
            if len(self.choice) == 1:
                out.append(f"{scores}: using {LABELS[self.choice[0][j]]}")
                continue
            counts = {name: sum(row[j] == name for row in self.choice) for name in self.names}
            used = ", ".join(f"{LABELS[name]} in {n}" for name, n in counts.items() if n)
            out.append(f"{scores} (mean over series); chosen per series: {used} of {len(self.choice)} series")
        return out


def _mean_observed(values: np.ndarray) -> float:
    """The mean over series that had validation cells (NaN when none had)."""
    seen = values[~np.isnan(values)]
    return float(seen.mean()) if len(seen) else float("nan")


@dataclass(frozen=True)
class WindowErrors:
    """Each forecaster's error per validation window: the summed squared (or absolute) errors over its observed
    steps, (N, C) float64 per name, and the observed steps (N, C); enough to choose on any set of windows."""

    sums: dict[str, torch.Tensor]
    steps: torch.Tensor

    @classmethod
    def of(
        cls,
        forecasts: dict[str, torch.Tensor],
        truth: torch.Tensor,
        truth_observed: torch.Tensor | None,
        metric: str = "mse",
    ) -> WindowErrors:
        """The errors of every forecaster `scored_names` gives (the blends too) of windows `truth` (N, H, C)."""
        n, h, c = truth.shape
        steps = torch.full((n, c), float(h)) if truth_observed is None else truth_observed.sum(1).to(truth.dtype)
        sums = {}
        for name in scored_names(forecasts):
            error = forecast_of(name, forecasts) - truth  # (N, H, C), one forecaster at a time
            error = error.abs_() if metric == "mae" else error.square_()
            if truth_observed is not None:
                error = error.masked_fill_(~truth_observed, 0.0)
            sums[name] = error.sum(dim=1).double()  # (N, C)
        return cls(sums, steps.double())

    @classmethod
    def concat(cls, parts: list[WindowErrors]) -> WindowErrors:
        """The errors of consecutive blocks of windows, as one."""
        return cls(
            {name: torch.cat([p.sums[name] for p in parts]) for name in parts[0].sums},
            torch.cat([p.steps for p in parts]),
        )


def decide(
    forecasts: dict[str, torch.Tensor],
    truth: torch.Tensor,
    truth_observed: torch.Tensor | None,
    columns: tuple[str, ...],
    enabled: bool = True,
    ids: np.ndarray | None = None,
    n_ids: int = 1,
    metric: str = "mse",
) -> Decision:
    """Per series and column, the forecaster (of `forecasts`, each (N, H, C), "model" and some candidates, and
    their blends) with the lowest MSE (or with `metric="mae"` MAE) on `truth` over that series' windows (`ids`
    (N,) names each window's series; None: one series). A series without a validation window keeps the model."""
    return choose(WindowErrors.of(forecasts, truth, truth_observed, metric), columns, enabled, ids, n_ids, metric)


def choose(
    errors: WindowErrors,
    columns: tuple[str, ...],
    enabled: bool = True,
    ids: np.ndarray | None = None,
    n_ids: int = 1,
    metric: str = "mse",
    include: np.ndarray | None = None,
) -> Decision:
    """`decide` from the windows' errors (`WindowErrors`), over the windows `include` marks (None: all)."""
    n = len(errors.steps)
    ids_t = torch.zeros(n, dtype=torch.long) if ids is None else torch.as_tensor(ids, dtype=torch.long)
    steps = errors.steps
    kept = None if include is None else torch.as_tensor(include).unsqueeze(1)  # (N, 1)
    if kept is not None:
        steps = steps.masked_fill(~kept, 0.0)
    count = torch.zeros(n_ids, steps.shape[1], dtype=torch.float64).index_add_(0, ids_t, steps)
    names = tuple(errors.sums)
    val_error = {}
    for name in names:
        sums = errors.sums[name] if kept is None else errors.sums[name].masked_fill(~kept, 0.0)
        total = torch.zeros_like(count).index_add_(0, ids_t, sums)
        val_error[name] = torch.where(count > 0, total / count.clamp(min=1.0), torch.nan).numpy()  # (n_ids, C)
    choice = tuple(
        tuple(
            min(names, key=lambda name: (val_error[name][i, j], FORECASTERS.index(name)))
            if enabled and count[i, j] > 0
            else "model"
            for j in range(len(columns))
        )
        for i in range(n_ids)
    )
    return Decision(columns, choice, val_error, metric)


def chosen(choice: tuple[tuple[str, ...], ...], ids: np.ndarray, n_columns: int) -> np.ndarray:
    """(N, C) the forecaster of each window's columns: `choice`'s row of its series (`ids` (N,); -1, or no
    choice at all: the model)."""
    table = np.array([*choice, ("model",) * n_columns], dtype=object).reshape(-1, n_columns)  # the model last
    return table[np.asarray(ids)]


def not_the_model(names: np.ndarray, columns: tuple[str, ...], per_series: bool) -> str:
    """One line on the columns (and series) a naive forecaster forecasts, from `names` (S, C), one row per
    series; "" when the model forecasts everything."""
    parts = []
    for j, column in enumerate(columns):
        naive = [name for name in names[:, j] if name != "model"]
        if not naive:
            continue
        if not per_series:
            parts.append(f"{column} by {LABELS[naive[0]]}")
            continue
        counts = ", ".join(f"{LABELS[name]} in {naive.count(name)}" for name in FORECASTERS[1:] if name in naive)
        parts.append(f"{column} in {len(naive)} of {len(names)} series ({counts})")
    if not parts:
        return ""
    return (
        f"forecast by a classical candidate, or the model blended with one, which beat the model on validation: "
        f"{'; '.join(parts)} (the forecaster "
        "column names each row's; --no-fallback ships the model everywhere)"
    )


def apply(
    choice: tuple[tuple[str, ...], ...], forecasts: dict[str, torch.Tensor], ids: np.ndarray | None = None
) -> torch.Tensor:
    """(N, H, C): each window's columns from the forecaster chosen for its series (`ids` (N,) index `choice`;
    -1: a series with no choice, which the model forecasts; None: the first series' choice for every
    window), the model's where `choice` is empty."""
    used = {name for row in choice for name in row}
    if used <= {"model"}:
        return forecasts["model"]
    n_columns = len(choice[0])
    index = torch.tensor([[FORECASTERS.index(name) for name in row] for row in choice] + [[0] * n_columns])
    picked = index[0].expand(len(forecasts["model"]), -1) if ids is None else index[torch.as_tensor(ids)]  # (N, C)
    shipped = forecasts["model"]
    for name in FORECASTERS[1:]:  # one (N, H, C) at a time, not all stacked; only those some series chose
        if name in used:
            chosen_here = (picked == FORECASTERS.index(name)).unsqueeze(1)
            shipped = torch.where(chosen_here, forecast_of(name, forecasts), shipped)
    return shipped
