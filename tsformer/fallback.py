"""Never worse than a classical forecaster on validation: per series and column, the shipped forecast is a
weighted mean of the model's and the candidates' (`tsformer.candidates`: repeat-last, seasonal naive, drift, ...).

The forecasters weighed form a library: the model, each candidate, and each blend (the mean of the model and
one candidate). At the end of training each is scored on the validation windows only (MSE on each series'
standardised values: the forecasters are compared within a series, so its scale cancels), and one of two
rules turns the scores into weights per series and column:

- best: the library forecaster with the lowest error ships alone (the model on a tie, or without a
  validation window; then the first in FORECASTERS order);
- weighted: each library forecaster weighs (its error)^-POWER, normalised (inverse-error weights, which
  average out the luck of one forecaster's best stretch where each series has few, correlated origins);
- model: the model alone, where choosing on earlier origins picked what lost later.

Which rule a run uses is chosen on validation too: each rule sets weights on the first two thirds of each
series' validation origins and is scored on the last third, by the geometric mean over series and columns of
its MSE there relative to the model alone's (scale-free, so each series weighs alike: the mean MSE let a few
series whose standardised values left their training range, as trends do, choose for every series); the
lowest wins, best on a tie (`choose`). A series some forecaster gets exactly on validation (an all-zero stretch)
ships that forecaster whatever the rule, and is left out of the rule's choice (`_solved`). Each
window's combination error comes from the Gram matrix of the forecasters' errors (`WindowErrors`), so any
weighting is scored without forecasting again. The test split is never used. The blends and MSE (over MAE)
were adopted on M4 Hourly's nested validation (benchmarks/NOTES.md, "Blends"), the weighted rule and its
power likewise ("Session 28").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tsformer.candidates import CANDIDATES
from tsformer.candidates import LABELS as CANDIDATE_LABELS
from tsformer.metrics import PANEL_SCORE_FLOOR

BLENDS = {f"blend_{name}": name for name in CANDIDATES}  # the blend -> its candidate, blended with the model
FORECASTERS = ("model", *CANDIDATES, *BLENDS)  # the library, in order of preference on a tie
BASE = ("model", *CANDIDATES)  # what a weight can fall on: a blend is half the model's and half its candidate's
LABELS = {**CANDIDATE_LABELS, **{blend: f"the model blended with {CANDIDATE_LABELS[c]}" for blend, c in BLENDS.items()}}
RULES = ("best", "weighted", "model")  # in order of preference on a tie
POWER = 4  # weighted: each library forecaster's weight is proportional to its validation MSE to the power -4
NESTED_SHARE = 2 / 3  # the rule: weights set on each series' first two thirds of validation origins, scored on the rest
GRAM_ELEMENTS = 1 << 22  # the float64 errors held at once while the Gram matrix sums (32 MiB)
SHOWN_WEIGHT = 0.005  # a combination's label names the forecasters weighing at least this


def _library(names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Each library forecaster over `names` (the base forecasters present, the model first) as its weights."""
    eye = np.eye(len(names))
    library = {name: eye[k] for k, name in enumerate(names)}
    for blend, candidate in BLENDS.items():
        if candidate in names:
            library[blend] = 0.5 * (eye[0] + eye[names.index(candidate)])
    return {name: library[name] for name in FORECASTERS if name in library}


@dataclass(frozen=True, eq=False)
class Weights:
    """Per series and column, each base forecaster's weight in the shipped forecast."""

    names: tuple[str, ...]  # the base forecasters weighed: "model" first, then candidates in CANDIDATES order
    values: np.ndarray  # (n_series, C, len(names)) float64, >= 0, summing to 1 over the last axis

    def __post_init__(self) -> None:
        if (
            not self.names
            or self.names[0] != "model"
            or self.values.ndim != 3
            or self.values.shape[2] != len(self.names)
        ):
            raise ValueError("weights need the model first and (n_series, columns, forecasters) values")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Weights) and self.names == other.names and np.array_equal(self.values, other.values)

    __hash__ = None  # an array inside: equal by value, not hashable

    @classmethod
    def model_only(cls, n_series: int, n_columns: int) -> Weights:
        return cls.of_names(tuple(("model",) * n_columns for _ in range(n_series)), ("model",))

    @classmethod
    def of_names(cls, table: tuple[tuple[str, ...], ...], names: tuple[str, ...]) -> Weights:
        """One library forecaster per series and column (a name of FORECASTERS) as weights over `names`."""
        library = _library(names)
        return cls(names, np.array([[library[name] for name in row] for row in table], dtype=np.float64))

    @property
    def choice(self) -> tuple[tuple[str, ...], ...]:
        """Per series and column, what ships: a library forecaster's name, or the combination's weights."""
        library = _library(self.names)
        return tuple(tuple(_label(row, self.names, library) for row in series) for series in self.values)

    @property
    def model_everywhere(self) -> bool:
        return bool((self.values[..., 0] == 1.0).all())

    def rows(self, ids: np.ndarray | None, n: int) -> torch.Tensor:
        """(N, C, K) float32 each window's weights (`ids` (N,) index the series; -1: the model's; None: the first
        series' for all `n` windows)."""
        model = np.zeros((1, *self.values.shape[1:]))
        model[..., 0] = 1.0
        table = np.concatenate([self.values, model])  # the model's row last: index -1
        picked = np.broadcast_to(table[0], (n, *table.shape[1:])) if ids is None else table[np.asarray(ids)]
        return torch.from_numpy(np.ascontiguousarray(picked)).float()


def _label(row: np.ndarray, names: tuple[str, ...], library: dict[str, np.ndarray]) -> str:
    """A library forecaster's name where `row` (K,) is one, else "model 0.55 + seasonal_naive 0.30 + ..."."""
    for name, weights in library.items():
        if np.array_equal(row, weights):
            return name
    order = np.argsort(-row, kind="stable")
    return " + ".join(f"{names[k]} {row[k]:.2f}" for k in order if row[k] >= SHOWN_WEIGHT)


def forecast_of(name: str, forecasts: dict[str, torch.Tensor]) -> torch.Tensor:
    """(N, H, C) the forecast of `name`: one of `forecasts` (the model's and the candidates'), or a blend: the
    mean of the model's and its candidate's."""
    if name in BLENDS:
        return 0.5 * (forecasts["model"] + forecasts[BLENDS[name]])
    return forecasts[name]


def scored_names(forecasts: dict[str, torch.Tensor]) -> tuple[str, ...]:
    """The library forecasters the fallback weighs, given the model's and some candidates' forecasts."""
    return tuple(_library(tuple(name for name in BASE if name in forecasts)))


@dataclass(frozen=True)
class Decision:
    columns: tuple[str, ...]
    weights: Weights  # per series and column (one series for a wide file)
    val_error: dict[str, np.ndarray]  # library forecaster -> (n_series, C) validation MSE or MAE (NaN: no window)
    metric: str = "mse"  # train.selection_metric: how validation errors were averaged
    rule: str = "best"  # RULES: how the errors became weights
    # each rule's MSE on the last third of origins relative to the model alone's (geometric mean over series and
    # columns), where the rule was chosen so
    nested: dict[str, float] | None = None

    def _rule_note(self) -> str:
        """How the rule was chosen, when it was ("" when it was given)."""
        if not self.nested:
            return ""
        others = ", ".join(f"{rule} {score:.4g}" for rule, score in self.nested.items() if rule != self.rule)
        return (
            f" (rule {self.rule}: MSE {self.nested[self.rule]:.4g} of the model alone's on the last third of "
            "validation origins with weights set on the rest, geometric mean over series and columns, "
            f"against {others})"
        )

    @property
    def choice(self) -> tuple[tuple[str, ...], ...]:
        return self.weights.choice

    @property
    def names(self) -> tuple[str, ...]:
        """The library forecasters scored, the model first."""
        return tuple(self.val_error)

    def lines(self) -> list[str]:
        """One line per column: what each scored on validation and what is used (per series: how often)."""
        out = []
        choice = self.choice
        for j, column in enumerate(self.columns):
            mse = {name: _mean_observed(self.val_error[name][:, j]) for name in self.names}
            others = [name for name in self.names[1:] if name not in BLENDS] or self.names[1:]
            best_naive = min(others, key=lambda name: mse[name])
            scores = f"{column}: model {mse['model']:.4g} vs {LABELS[best_naive]} {mse[best_naive]:.4g} on validation"
            scores += " MAE" if self.metric == "mae" else ""
            if self.rule == "model" and self.nested and all(row[j] == "model" for row in choice):
                out.append(f"{scores}: using the model alone everywhere{self._rule_note()}")
                continue
            if self.rule == "weighted":
                mean = self.weights.values[:, j].mean(0)
                shares = ", ".join(
                    f"{LABELS[name]} {mean[k]:.2f}"
                    for k, name in enumerate(self.weights.names)
                    if mean[k] >= SHOWN_WEIGHT
                )
                where = " (mean over series)" if len(choice) > 1 else ""
                out.append(f"{scores}{where}; {self._weighted_note()}; mean weights: {shares}")
                continue
            if len(choice) == 1:
                out.append(f"{scores}: using {LABELS[choice[0][j]]}{self._rule_note()}")
                continue
            counts = {name: sum(row[j] == name for row in choice) for name in self.names}
            used = ", ".join(f"{LABELS[name]} in {n}" for name, n in counts.items() if n)
            out.append(
                f"{scores} (mean over series); chosen per series: {used} of {len(choice)} series{self._rule_note()}"
            )
        return out

    def _weighted_note(self) -> str:
        return (
            "each forecaster of the model, the candidates and their blends weighted by its validation MSE to the "
            f"power -{POWER}{self._rule_note()}"
        )


def _mean_observed(values: np.ndarray) -> float:
    """The mean over series that had validation cells (NaN when none had)."""
    seen = values[~np.isnan(values)]
    return float(seen.mean()) if len(seen) else float("nan")


@dataclass(frozen=True)
class WindowErrors:
    """Each validation window's errors: per library forecaster the summed squared (or absolute) errors over its
    observed steps, (N, C) float64, the observed steps (N, C), and for MSE each series' Gram matrix of the base
    forecasters' errors summed over its late origins (`late_origins`), (n_ids, C, K, K): any weighting's squared
    error on those windows follows from it, which is what the nested rule scores."""

    sums: dict[str, torch.Tensor]
    steps: torch.Tensor
    names: tuple[str, ...]  # the base forecasters present, the model first
    late_gram: torch.Tensor | None = None  # None with the MAE
    late: np.ndarray | None = None  # (N,) the windows `late_gram` sums; None with the MAE

    @classmethod
    def of(
        cls,
        forecasts: dict[str, torch.Tensor],
        truth: torch.Tensor,
        truth_observed: torch.Tensor | None,
        metric: str = "mse",
        ids: np.ndarray | None = None,
        late: np.ndarray | None = None,
        n_ids: int = 1,
    ) -> WindowErrors:
        """The errors of every forecaster `scored_names` gives (the blends too) of windows `truth` (N, H, C), of
        series `ids` (N,) (None: one series), whose late origins `late` marks (N,) (None: `late_origins` of these
        windows, when they are all of them)."""
        n, h, c = truth.shape
        steps = torch.full((n, c), float(h)) if truth_observed is None else truth_observed.sum(1).to(truth.dtype)
        names = tuple(name for name in BASE if name in forecasts)
        if metric == "mse":
            ids = np.zeros(n, dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
            late = late_origins(ids, n_ids) if late is None else np.asarray(late, dtype=bool)
            sums, late_gram = _squared_errors(forecasts, names, truth, truth_observed, ids, late, n_ids)
            return cls(sums, steps.double(), names, late_gram, late)
        sums = {}
        for name in scored_names(forecasts):
            error = (forecast_of(name, forecasts) - truth).abs_()  # (N, H, C), one forecaster at a time
            if truth_observed is not None:
                error = error.masked_fill_(~truth_observed, 0.0)
            sums[name] = error.sum(dim=1).double()  # (N, C)
        return cls(sums, steps.double(), names)

    @classmethod
    def concat(cls, parts: list[WindowErrors]) -> WindowErrors:
        """The errors of consecutive blocks of windows, as one."""
        squared = parts[0].late_gram is not None
        return cls(
            {name: torch.cat([p.sums[name] for p in parts]) for name in parts[0].sums},
            torch.cat([p.steps for p in parts]),
            parts[0].names,
            sum(p.late_gram for p in parts) if squared else None,
            np.concatenate([p.late for p in parts]) if squared else None,
        )


def _squared_errors(
    forecasts: dict[str, torch.Tensor],
    names: tuple[str, ...],
    truth: torch.Tensor,
    truth_observed: torch.Tensor | None,
    ids: np.ndarray,
    late: np.ndarray,
    n_ids: int,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Each library forecaster's summed squared error per window (N, C), and each series' Gram matrix of the
    errors of `names` over its `late` windows (n_ids, C, K, K). A few windows at a time, so neither the
    (N, H, C, K) errors nor the windows' Gram matrices are ever held whole."""
    n, h, c = truth.shape
    library = {name: torch.from_numpy(w) for name, w in _library(names).items()}
    rows = max(1, GRAM_ELEMENTS // (h * c * len(names)))
    sums: dict[str, list[torch.Tensor]] = {name: [] for name in library}
    late_gram = torch.zeros(n_ids, c, len(names), len(names), dtype=torch.float64)
    for start in range(0, max(n, 1), rows):  # one empty block when there are no windows
        block = slice(start, start + rows)
        errors = torch.stack([forecasts[name][block] - truth[block] for name in names], dim=-1).double()  # (n, H, C, K)
        if truth_observed is not None:
            errors.masked_fill_(~truth_observed[block].unsqueeze(-1), 0.0)
        gram = torch.einsum("nhck,nhcl->nckl", errors, errors)  # (n, C, K, K)
        for name, weights in library.items():
            sums[name].append(_combined(gram, weights))
        kept = torch.from_numpy(late[block])
        late_gram.index_add_(0, torch.from_numpy(ids[block])[kept], gram[kept])
    return {name: torch.cat(parts) for name, parts in sums.items()}, late_gram


def late_origins(ids: np.ndarray, n_ids: int) -> np.ndarray:
    """(N,) whether each window is among the last 1 - NESTED_SHARE of its series' validation origins (`ids` (N,)
    each window's series, in time order within each): where the nested rule scores what was set on the rest."""
    rank, counts = origin_ranks(ids, n_ids)
    return rank >= np.round(counts[ids] * NESTED_SHARE)


def _combined(gram: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(N, C) the summed squared error of the combination `weights` ((K,), or (N, C, K) per window)."""
    if weights.dim() == 1:
        weights = weights.expand(*gram.shape[:2], -1)
    return torch.einsum("nck,nckl,ncl->nc", weights.double(), gram, weights.double())


def decide(
    forecasts: dict[str, torch.Tensor],
    truth: torch.Tensor,
    truth_observed: torch.Tensor | None,
    columns: tuple[str, ...],
    enabled: bool = True,
    ids: np.ndarray | None = None,
    n_ids: int = 1,
    metric: str = "mse",
    rule: str | None = None,
) -> Decision:
    """Per series and column, the weights of `forecasts` (each (N, H, C), "model" and some candidates, and their
    blends) from their MSE (or with `metric="mae"` MAE) on `truth` over that series' windows (`ids` (N,) names
    each window's series; None: one series). A series without a validation window keeps the model."""
    errors = WindowErrors.of(forecasts, truth, truth_observed, metric, ids, n_ids=n_ids)
    return choose(errors, columns, enabled, ids, n_ids, metric, rule=rule)


def choose(
    errors: WindowErrors,
    columns: tuple[str, ...],
    enabled: bool = True,
    ids: np.ndarray | None = None,
    n_ids: int = 1,
    metric: str = "mse",
    include: np.ndarray | None = None,
    rule: str | None = None,
    solve: bool = True,
) -> Decision:
    """`decide` from the windows' errors (`WindowErrors`), over the windows `include` marks (None: all), by
    `rule` (None: the rule that wins on the last third of each series' origins, chosen over every window; "best"
    with the MAE, whose combinations the errors cannot score). With `solve` (and `enabled`) a series and column some
    forecaster has solved on those windows (`_solved`) ships the best whatever the rule."""
    n = len(errors.steps)
    ids_t = torch.zeros(n, dtype=torch.long) if ids is None else torch.as_tensor(ids, dtype=torch.long)
    included = np.ones(n, dtype=bool) if include is None else np.asarray(include, dtype=bool)
    nested = None
    if not enabled:
        rule = "model"
    elif rule is None:
        if include is not None:
            raise ValueError("the rule is chosen over every window: give `rule` with `include`")
    count, val_error = _validation_errors(errors, ids_t, n_ids, included)
    solved = _solved(np.stack(list(val_error.values())), metric)  # (n_ids, C) over the included windows
    if enabled and rule is None:  # over every window (`include` is None), so `solved` is every window's
        rule, nested = (
            ("best", None) if errors.late_gram is None else _nested_rule(errors, columns, ids_t, n_ids, solved)
        )
    values = _weights(val_error, count, errors.names, rule, solved if enabled and solve else None)
    return Decision(columns, Weights(errors.names, values), val_error, metric, rule, nested)


def _validation_errors(
    errors: WindowErrors, ids: torch.Tensor, n_ids: int, included: np.ndarray
) -> tuple[torch.Tensor, dict[str, np.ndarray]]:
    """Observed steps (n_ids, C) and each library forecaster's mean error (n_ids, C) over the included windows."""
    kept = torch.as_tensor(included).unsqueeze(1)  # (N, 1)
    steps = errors.steps.masked_fill(~kept, 0.0)
    count = torch.zeros(n_ids, steps.shape[1], dtype=torch.float64).index_add_(0, ids, steps)
    val_error = {}
    for name, sums in errors.sums.items():
        total = torch.zeros_like(count).index_add_(0, ids, sums.masked_fill(~kept, 0.0))
        val_error[name] = torch.where(count > 0, total / count.clamp(min=1.0), torch.nan).numpy()  # (n_ids, C)
    return count, val_error


def _weights(
    val_error: dict[str, np.ndarray], count: torch.Tensor, names: tuple[str, ...], rule: str, solved: np.ndarray | None
) -> np.ndarray:
    """(n_ids, C, K) each series and column's weights over `names` by `rule` ("model": the model's alone); a series
    and column marked `solved` (`_solved`; None: none) ships the best whatever the rule."""
    library = _library(names)
    vectors = np.stack([library[name] for name in val_error])  # (L, K) in val_error's (FORECASTERS) order
    errors = np.stack(list(val_error.values()))  # (L, n_ids, C)
    best = vectors[np.nan_to_num(errors, nan=np.inf).argmin(axis=0)]  # (n_ids, C, K): FORECASTERS order breaks ties
    model = np.zeros_like(best)
    model[..., 0] = 1.0
    if rule == "weighted":
        least = errors.min(axis=0)  # (n_ids, C)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(least > 0, least / errors, (errors == 0).astype(np.float64))  # 1 for the best
        share = np.nan_to_num(ratio) ** POWER
        if (least == 0).any():  # a perfect forecaster ships alone, the first of several
            first = np.argmax(errors == 0, axis=0)
            share = np.where(least == 0, np.arange(len(errors))[:, None, None] == first, share)
        share = share / share.sum(axis=0, keepdims=True).clip(min=1e-300)
        combined = np.einsum("lnc,lk->nck", share, vectors)
    else:
        combined = best if rule == "best" else model
    if solved is not None:
        combined = np.where(solved[..., None], best, combined)
    return np.where(count.numpy()[..., None] > 0, combined, model)


def _solved(errors: np.ndarray, metric: str) -> np.ndarray:
    """(n_ids, C) the series and columns some library forecaster forecasts on validation to within the panel score's
    floor (an MSE of 1e-4 of the series' scale, or its root for MAE): an all-zero or a constant stretch that a
    naive forecaster gets exactly. The rule's choice would weigh such a series by a ratio of two errors of almost
    nothing, which outweighed every other series (80 such series of 200 chose "best" for the 120 intermittent ones,
    whose test MASE went 0.769 -> 0.826), so a series solved on every validation window is left out of that
    choice and ships the best forecaster under any rule."""
    floor = PANEL_SCORE_FLOOR if metric == "mse" else PANEL_SCORE_FLOOR**0.5
    return np.nan_to_num(errors, nan=np.inf).min(axis=0) <= floor


def _nested_rule(
    errors: WindowErrors, columns: tuple[str, ...], ids: torch.Tensor, n_ids: int, solved: np.ndarray
) -> tuple[str, dict[str, float] | None]:
    """The rule whose weights, set on the first NESTED_SHARE of each series' validation origins, score the lowest
    MSE on the rest relative to the model alone's, as a geometric mean over the series and columns scored (RULES
    order breaks ties, so "best" wins where every forecaster is exact); "best" where no series has origins on both
    sides."""
    ids_np, late = ids.numpy(), errors.late
    if late.all() or not late.any():
        return "best", None
    steps, _ = _validation_errors(errors, ids, n_ids, late)  # (n_ids, C) observed steps scored
    late_mse = {}
    for rule in RULES:
        weights = choose(errors, columns, True, ids_np, n_ids, "mse", include=~late, rule=rule, solve=False).weights
        total = _combined(errors.late_gram, torch.from_numpy(weights.values))  # (n_ids, C)
        late_mse[rule] = (total / steps.clamp(min=1.0)).numpy()
    scored = (steps > 0).numpy() & ~solved  # a series solved on every window ships the best under any rule
    if not scored.any():
        return "best", None
    # each MSE floored as the epoch's panel score floors it: a series some forecaster gets exactly (a constant one)
    # is solved by either, and its ratio's logarithm must not outweigh every other series
    model = np.maximum(late_mse["model"][scored], PANEL_SCORE_FLOOR)
    scores = {
        rule: float(np.exp(np.log(np.maximum(mse[scored], PANEL_SCORE_FLOOR) / model).mean()))
        for rule, mse in late_mse.items()
    }
    return min(RULES, key=lambda rule: (scores[rule], RULES.index(rule))), scores


def origin_ranks(ids: np.ndarray, n_ids: int) -> tuple[np.ndarray, np.ndarray]:
    """Each window's place among its series' windows, which come in time order, (N,), and each series' count of
    them, (n_ids,)."""
    counts = np.bincount(ids, minlength=n_ids)
    rank = np.empty(len(ids), dtype=np.int64)
    order = np.argsort(ids, kind="stable")  # series by series, each in time order
    rank[order] = np.arange(len(ids)) - np.repeat(np.cumsum(counts) - counts, counts)
    return rank, counts


def chosen(weights: Weights | None, ids: np.ndarray, n_columns: int) -> np.ndarray:
    """(N, C) the forecaster of each window's columns: its series' label in `weights` (`ids` (N,); -1, or no
    weights at all: the model)."""
    labels = () if weights is None else weights.choice
    table = np.array([*labels, ("model",) * n_columns], dtype=object).reshape(-1, n_columns)  # the model last
    return table[np.asarray(ids)]


def not_the_model(names: np.ndarray, columns: tuple[str, ...], per_series: bool) -> str:
    """One line on the columns (and series) not forecast by the model alone, from `names` (S, C) (`chosen`'s
    labels), one row per series; "" when the model forecasts everything."""
    parts = []
    for j, column in enumerate(columns):
        naive = [name for name in names[:, j] if name != "model"]
        if not naive:
            continue
        if not per_series:
            parts.append(f"{column} by {LABELS.get(naive[0], naive[0])}")
            continue
        counts = [f"{LABELS[name]} in {naive.count(name)}" for name in FORECASTERS[1:] if name in naive]
        mixed = sum(name not in LABELS for name in naive)
        counts += [f"a weighted mean in {mixed}"] if mixed else []
        parts.append(f"{column} in {len(naive)} of {len(names)} series ({', '.join(counts)})")
    if not parts:
        return ""
    return (
        "forecast by a classical candidate, a blend, or a weighted mean of the model and the candidates, which beat "
        f"the model alone on validation: {'; '.join(parts)} (the forecaster "
        "column names each row's; a run trained with --no-fallback ships the model everywhere)"
    )


def model_weight(weights: Weights | None, ids: np.ndarray | None, n: int, n_columns: int) -> torch.Tensor:
    """(N, C) each window's weight on the model in its shipped forecast (`ids` as `apply` takes them); ones
    without weights (the model everywhere)."""
    if weights is None:
        return torch.ones(n, n_columns)
    return weights.rows(ids, n)[..., 0]


def apply(weights: Weights | None, forecasts: dict[str, torch.Tensor], ids: np.ndarray | None = None) -> torch.Tensor:
    """(N, H, C): each window's columns as the weighted mean of the forecasters, with its series' weights (`ids`
    (N,) index `weights`; -1: a series with none, which the model forecasts; None: the first series' weights for
    every window), the model's where there are no weights."""
    model = forecasts["model"]
    if weights is None or weights.model_everywhere:
        return model
    rows = weights.rows(ids, len(model)).unsqueeze(1)  # (N, 1, C, K)
    shipped = torch.where(rows[..., 0] > 0, rows[..., 0] * model, torch.zeros((), dtype=model.dtype))
    for k, name in enumerate(weights.names[1:], start=1):  # one (N, H, C) at a time, only those weighed somewhere
        if (rows[..., k] > 0).any():
            shipped = shipped + torch.where(rows[..., k] > 0, rows[..., k] * forecasts[name], 0.0)
    return shipped
