"""The recipe search under a time budget (`train.time_limit`): held-out models of a small declared space, all
scored on the run's one set of validation windows, every choice made there.

The space, in the order it is tried while the budget lasts:
1. the default recipe (what train runs without a time limit);
2. a longer context: twice the automatic one, up to SEARCH_MAX_CONTEXT steps, where the training rows allow;
3. for data below a day, the other choice of the learned weekly cycle (`model.cycle`, 168 for hourly data): the
   week where the default has no cycle, none where it has the week (a panel's default);
4. another loss: mae for a wide file (mse by default), the scale-free mase for a panel (mae by default);
5. more members of the best of those: the same recipe from the next seeds, each kept only when the mean
   forecast of the members kept so far and it scores better on validation (greedy forward selection, the way
   ensemble selection adds models), up to MAX_MEMBERS; the first one that does not help ends the search.

Each candidate is planned from what the trained ones took: it starts only when its held-out run, the final
fits of the members it would join and the fallback and calibration are expected to fit in what is left, and
its training stops at a deadline that keeps that room, so the budget holds even where a plan was off.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from tsformer.candidates import steps_per_week
from tsformer.config import SEARCH_MAX_CONTEXT, Config, longer_context
from tsformer.data import Split, WindowIndex
from tsformer.data.choices import resolve_from_data
from tsformer.data.prepare import Prepared, prepare
from tsformer.metrics import ValidationScore, squared_error_sums, validation_score
from tsformer.model import ForecasterBase

MAX_MEMBERS = 5  # the most members the search ensembles
# the loss tried beside the default's: a wide file's mse against mae; a panel's mae against the scale-free mase
OTHER_LOSS = {"mse": "mae", "mae": "mase", "mase": "mae"}


@dataclass(frozen=True)
class Candidate:
    """One recipe to train: its name in the log, its resolved config and the data prepared for it."""

    name: str  # "default", "context 672", "loss mse", "seed 2"
    config: Config
    data: Prepared


@dataclass
class HeldOut:
    """A candidate trained on the training rows, at its best validation epoch."""

    candidate: Candidate
    model: ForecasterBase  # in eval mode, the best epoch's weights
    outputs: tuple[torch.Tensor, torch.Tensor | None]  # its validation forecasts (N, H, C) and quantiles or None
    n_train_windows: int
    best_epoch: int
    epochs_run: int
    seconds: float  # its training's wall time, validation included
    seconds_to_best: float  # up to its best epoch: what its final fit is expected to take
    stopped_by: str
    history: list[dict[str, float]]
    steps_to_best: int = 0  # optimiser steps up to its best epoch: a final fit that takes fewer is not shipped


# trains a candidate until its best epoch or the deadline (time.monotonic()) and returns it
TrainHeldOut = Callable[[Candidate, float], HeldOut]


@dataclass
class Searched:
    """The members chosen (one recipe, one or more seeds) and the search's log."""

    members: list[HeldOut]
    val_loss: float  # validation score (`metrics.validation_score`) of the members' mean forecast
    default_val_loss: float  # of the default recipe alone
    log: pd.DataFrame  # one row per candidate trained or left out
    budget: float

    @property
    def config(self) -> Config:
        """The chosen recipe's config, with its members."""
        cfg = self.members[0].candidate.config
        return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, members=len(self.members)))

    @property
    def data(self) -> Prepared:
        return dataclasses.replace(self.members[0].candidate.data, config=self.config)

    @property
    def outputs(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        return mean_outputs([m.outputs for m in self.members])

    def line(self) -> str:
        trained = self.log[self.log["epochs_run"].notna()]  # those that trained (a variant left out did not)
        skipped = self.log.loc[self.log["outcome"] == "not tried (time)", "candidate"].tolist()
        cut = trained.loc[trained["stopped_by"] == "time", "candidate"].tolist()
        cfg = self.config
        cycle = f"cycle {cfg.model.cycle}" if cfg.model.cycle else "no cycle"
        return (
            f"recipe search within {self.budget:g} s (train.time_limit): {len(trained)} candidates trained and scored "
            f"on the same validation windows (search.csv); chose context {cfg.model.context_len}, loss "
            f"{cfg.train.loss}, {cycle}, {len(self.members)} member{'s' * (len(self.members) > 1)}: validation score "
            f"{self.val_loss:.4f} against {self.default_val_loss:.4f} for the default recipe alone"
            + (f"; not tried for time: {', '.join(skipped)}" if skipped else "")
            + (
                f"; stopped at the deadline before converging: {', '.join(cut)} (a longer --time-limit helps)"
                if cut
                else ""
            )
        )


def _log_table(rows: list[dict]) -> pd.DataFrame:
    """The search log, its counts as whole numbers (empty where a candidate did not train)."""
    counts = {"context_len", "seed", "epochs_run", "best_epoch"}
    table = pd.DataFrame(rows)
    return table.astype({column: "Int64" for column in counts & set(table.columns)})


def mean_outputs(outputs: list[tuple[torch.Tensor, torch.Tensor | None]]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The members' mean forecast and quantiles, as `Ensemble` forms them."""
    point = torch.stack([p for p, _ in outputs]).mean(0)
    if outputs[0][1] is None:
        return point, None
    return point, torch.stack([q for _, q in outputs]).mean(0)


@dataclass(frozen=True)
class ValidationTargets:
    """The validation windows' targets, gathered once: every candidate's (the search compares only candidates
    with the same validation targets, `_same_validation`)."""

    target: torch.Tensor  # (N, H, C)
    observed: torch.Tensor | None  # (N, H, C) bool; None: all observed
    series: np.ndarray  # (N,) each window's series
    n_series: int

    @classmethod
    def of_windows(cls, val: WindowIndex, windows: Split) -> ValidationTargets:
        """The targets of validation windows `val`, split into contexts and targets as `windows`."""
        return cls(windows.target, windows.target_observed, val.series(), val.n_series)

    def of(self, point: torch.Tensor) -> ValidationScore:
        """The validation score (`metrics.validation_score`, what chose each epoch) of forecasts (N, H, C)."""
        sums, counts = squared_error_sums(point, self.target, self.observed)
        return validation_score(sums, counts, self.series, self.n_series)

    def score(self, point: torch.Tensor) -> float:
        return self.of(point).score


def validation_targets(data: Prepared) -> ValidationTargets:
    """The targets of `data`'s validation windows, their observed mask and series."""
    val = data.split_windows("val")
    return ValidationTargets.of_windows(val, val.split(data.config.model.context_len))


@dataclass(frozen=True)
class Variant:
    """Step 2 or 3 of the space, prepared only when it is tried."""

    name: str
    context_len: int
    make: Callable[[], Candidate | str]  # the candidate, or why the data cannot take it


def variants(given: Config, data: Prepared) -> list[Variant | str]:
    """Steps 2 to 4 of the space; one the data cannot take is its name and why, for the log."""
    cfg = data.config
    model, train = cfg.model, cfg.train
    found: list[Variant | str] = []
    longest_rows = int(data.borders.train_end.max())
    longer = longer_context(longest_rows, model.horizon, model.patch_len, model.context_len)

    def prepared(name: str, **changes) -> Callable[[], Candidate | str]:
        """The given config with `changes` to its model, its automatic settings chosen again, prepared."""

        def make() -> Candidate | str:
            changed, _ = resolve_from_data(
                dataclasses.replace(given, model=dataclasses.replace(given.model, **changes)), data.frame
            )
            changed_data = prepare(data.frame, changed, ())
            if not _same_validation(data, changed_data):  # a longer context may leave early validation windows out
                return "its validation windows differ from the default's, so it cannot be compared"
            return Candidate(name, changed, changed_data)

        return make

    if longer:
        name = f"context {longer}"
        found.append(Variant(name, longer, prepared(name, context_len=longer, patch_len=model.patch_len)))
    else:
        why = (
            f"the context of {model.context_len} steps is the longest tried already"
            if model.context_len >= SEARCH_MAX_CONTEXT
            else f"none leaves as many training windows as steps ({longest_rows} rows)"
        )
        found.append(f"longer context: {why}")
    week = steps_per_week(data.frame.freq)
    cycle = 0 if model.cycle == week else week  # the other choice: the week, or none where the default has it
    if week and (cycle or model.transformer or model.context_skip):  # a model without a cycle needs another part
        name = f"cycle {cycle}" if cycle else "no cycle"
        found.append(Variant(name, model.context_len, prepared(name, cycle=cycle)))
    other = OTHER_LOSS.get(train.loss)
    if other is not None:
        other_cfg = dataclasses.replace(cfg, train=dataclasses.replace(train, loss=other))
        other_data = dataclasses.replace(data, config=other_cfg)
        found.append(
            Variant(f"loss {other}", model.context_len, lambda: Candidate(f"loss {other}", other_cfg, other_data))
        )
    return found


def search(
    given: Config,
    data: Prepared,
    budget_end: float,
    calibration_seconds: float,
    train: TrainHeldOut,
    final_share: float = 1.0,
) -> Searched:
    """The members chosen on validation by training the space's candidates while `budget_end` (time.monotonic())
    allows; `calibration_seconds` is kept free for the fallback and calibration after the search. `final_share`:
    a final fit's time against its held-out run's (it trains the same epochs over every row's windows)."""
    run = _Search(budget_end, calibration_seconds, train, validation_targets(data))
    start = time.monotonic()  # the default recipe: what is left, shared between its run and its final fit
    default = train(Candidate("default", data.config, data), start + (run.deadline(0.0) - start) / (1 + final_share))
    default_row = run.record("default", default, "chosen")
    best, best_loss = run.best_recipe(default, default_row, variants(given, data))
    members, members_loss = run.members(best, best_loss)
    return Searched(members, members_loss, default_row["val_score"], _log_table(run.rows), given.train.time_limit)


class _Search:
    """The search's budget and log; each step trains what fits."""

    def __init__(
        self,
        budget_end: float,
        calibration_seconds: float,
        train: TrainHeldOut,
        targets: ValidationTargets,
    ):
        self.budget_end, self.calibration_seconds, self.train = budget_end, calibration_seconds, train
        self.targets = targets
        self.rows: list[dict] = []  # the log, in the order candidates were tried

    def fits(self, estimate: float, finals: float) -> bool:
        """Whether a run of `estimate` seconds, then final fits of `finals` and the calibration fit in the budget."""
        return time.monotonic() + estimate + finals + self.calibration_seconds <= self.budget_end

    def deadline(self, finals: float) -> float:
        """When a run must stop to leave `finals` seconds of final fits and the calibration."""
        return self.budget_end - self.calibration_seconds - finals

    def record(self, name: str, held: HeldOut | None, outcome: str, members_loss: float = float("nan")) -> dict:
        row: dict = {"candidate": name, "outcome": outcome}
        if held is not None:
            cfg = held.candidate.config
            row |= {
                "context_len": cfg.model.context_len,
                "loss": cfg.train.loss,
                "seed": cfg.train.seed,
                "epochs_run": held.epochs_run,
                "best_epoch": held.best_epoch,
                "stopped_by": held.stopped_by,
                "seconds": round(held.seconds, 2),
                "val_score": self.targets.score(held.outputs[0]),
                "members_val_score": members_loss,
            }
        self.rows.append(row)
        return row

    def best_recipe(self, default: HeldOut, default_row: dict, space: list[Variant | str]) -> tuple[HeldOut, float]:
        """Steps 2 to 4: each variant that fits, against the best so far; -> the best and its validation score."""
        best, best_row = default, default_row
        for variant in space:
            if isinstance(variant, str):
                name, why = variant.split(": ", 1)
                self.record(name, None, f"left out: {why}")
                continue
            ratio = variant.context_len / default.candidate.config.model.context_len
            estimate, final = default.seconds * ratio, max(default.seconds_to_best * ratio, best.seconds_to_best)
            if not self.fits(estimate, final):
                self.record(variant.name, None, "not tried (time)")
                continue
            candidate = variant.make()
            if isinstance(candidate, str):
                self.record(variant.name, None, f"left out: {candidate}")
                continue
            held = self.train(candidate, self.deadline(final))
            row = self.record(variant.name, held, "lost")
            if row["val_score"] < best_row["val_score"]:
                best_row["outcome"], row["outcome"] = "lost", "chosen"
                best, best_row = held, row
        return best, best_row["val_score"]

    def members(self, best: HeldOut, best_loss: float) -> tuple[list[HeldOut], float]:
        """Step 5: the best recipe from the next seeds, each kept while the members' mean improves on validation."""
        members, members_loss, recipe = [best], best_loss, best.candidate
        for k in range(1, MAX_MEMBERS):
            train_cfg = dataclasses.replace(recipe.config.train, seed=recipe.config.train.seed + k)
            seed_cfg = dataclasses.replace(recipe.config, train=train_cfg)
            name = f"seed {train_cfg.seed}"
            to_best = [m.seconds_to_best for m in members]
            finals = sum(to_best) + float(np.mean(to_best))
            if not self.fits(float(np.mean([m.seconds for m in members])), finals):
                self.record(name, None, "not tried (time)")
                break
            candidate = Candidate(name, seed_cfg, dataclasses.replace(recipe.data, config=seed_cfg))
            held = self.train(candidate, self.deadline(finals))
            loss = self.targets.score(mean_outputs([m.outputs for m in members + [held]])[0])
            if loss >= members_loss:
                self.record(name, held, "left out: the members' validation did not improve", loss)
                break
            members.append(held)
            members_loss = loss
            self.record(name, held, "member", loss)
        return members, members_loss


def _same_validation(a: Prepared, b: Prepared) -> bool:
    """Whether two preparations of one frame score the same validation targets."""
    (starts_a, _), (starts_b, _) = a.target_starts("val"), b.target_starts("val")
    return np.array_equal(starts_a, starts_b)
