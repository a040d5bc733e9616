"""The linear candidate: the model's context skip alone, fitted by least squares on the training windows.

The context skip (`forecaster.ContextSkip`) maps each token's standardised context linearly to the H steps after
it. Fitted in closed form on the training windows (every token, as the loss trains them, each row weighing as
the MSE weighs it) it is a strong linear autoregression that stochastic training of the whole model does not
always reach: on a panel of short annual trends (the World Bank's fertility rates, 219 countries) it scored a
seventh of the trained model's validation error, and on ETTh1 it wins validation on some columns
(benchmarks/NOTES.md, sessions 38 and 39). So it is a candidate beside the model (`linear` in train.candidates):
the fallback (`tsformer.fallback`) weighs it per series and column on validation like any other, and the final
fit (`tsformer.final`) fits it again on every row.

Its ridge is its own in-sample choice, as ETS picks its form (`choose_ridge`): each series' last fifth of the
training windows forecast by a fit of the earlier ones, all from sums of one pass over the windows
(`Equations`). Chosen on validation instead, twelve variants of one candidate won the very windows that then
weigh it against the others more often than they deserved (benchmarks/NOTES.md, session 41).

It is a model of the same context, patches and tokens without the Transformer (`model.transformer` false), so
forecasting it costs the skip alone; its future skip and learned cycle stay at zero. It reads the windows it is
given (the training split's), nothing else: `tsformer check` (linear/rows) proves it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from tsformer.config import LINEAR_RIDGES, LINEAR_ROWS, ModelConfig
from tsformer.data.windows import WindowIndex, Windows
from tsformer.layout import Layout
from tsformer.model.ensemble import Ensemble, build_forecaster
from tsformer.model.forecaster import Forecaster
from tsformer.model.inference import ForecasterBase

# rows (a token of a sequence) the normal equations sum at most, from windows drawn at random: every token of every
# ETTh1 training window (about 800,000) and a third of M4 Hourly's, which scored better on validation than 2^18
# (NOTES, session 39); one row per window and sequence on the last token's rows, so every window of both
MAX_ROWS = 1 << 20
# added to the Gram matrix's diagonal, relative to its mean, where train.linear_ridge was not chosen (a run from
# before it was, and where too few windows choose it): a tie-breaker rather than a prior
RIDGE = 1e-4
HELD_SHARE = 0.2  # each series' last share of the training windows on which a fit of the earlier ones picks the ridge
BATCH_ELEMENTS = 1 << 21  # the skip's inputs held at once (8 MiB of float32), whatever the series and context
# the rows it fits on (`train.linear_rows` less auto), in words: every token's (each token's window padded with
# zeros before the start, as the loss trains the model: many rows, for short series) or the last token's (the
# whole context, the rows a forecast reads: the better fit where windows are many)
ROWS = LINEAR_ROWS[1:]
ROWS_READ = {"every_token": "every token's rows", "last_token": "the last token's rows"}


def members_of(model: ForecasterBase) -> list[Forecaster]:
    """An ensemble's members, or the model itself."""
    return list(model.members) if isinstance(model, Ensemble) else [model]


def applies(model: ForecasterBase) -> bool:
    """Whether the model has a linear candidate: every member a context skip and no quantile head (a candidate
    forecasts a point, and the model's quantiles are its own)."""
    return all(m.context_skip is not None and m.quantile_head is None for m in members_of(model))


def shell(cfg: ModelConfig, layout: Layout) -> ForecasterBase:
    """The linear candidate of a model of `cfg` reading `layout`, every weight zero: the same members, contexts,
    patches and tokens without the Transformer, in float32 (a linear map gains nothing from bfloat16)."""
    linear_cfg = dataclasses.replace(cfg, transformer=False, precision="float32")
    with torch.random.fork_rng(devices=[]):  # every weight is set below: training's random draws stay as they were
        linear = build_forecaster(linear_cfg, layout, "mse")
    with torch.no_grad():
        for parameter in linear.parameters():
            parameter.zero_()
    return linear.eval()


def fit(
    model: ForecasterBase, windows: WindowIndex, seed: int, rows: str = "every_token", ridge: float = RIDGE
) -> ForecasterBase:
    """The linear candidate of `model` fitted on `windows` (at most MAX_ROWS rows of them, the windows drawn in an
    order fixed by `seed`), on the CPU, on the `rows` of each (ROWS), with `ridge` (relative to the Gram matrix's
    mean diagonal); `model` itself is only read for its configuration and layout."""
    return solve(model, normal_equations(model, windows, seed, rows, choosing=False), ridge)


@dataclass(frozen=True)
class MemberSums:
    """One member's least-squares sums over the windows it was given, in float64: the Gram matrix (T*P, T*P) and
    cross products (T*P, H) of every window's rows, and of the early windows' only (each series' windows whose
    targets end before its held ones)."""

    gram: torch.Tensor
    cross: torch.Tensor
    early_gram: torch.Tensor
    early_cross: torch.Tensor


@dataclass(frozen=True)
class Held:
    """The held windows' (each series' last HELD_SHARE) forecast rows, the last token's, with every member's inputs
    side by side: their Gram matrix (S, S) and cross products with the members' mean target (S, H), S the members'
    T*P summed, that target's sum of squares and the row count. The candidate forecasts the members' mean, whose
    error is the concatenated inputs times the members' weights over M less the mean target, so these score it
    (`held_mse`); with one member they are its own rows' sums."""

    gram: torch.Tensor
    cross: torch.Tensor
    squares: torch.Tensor  # () the mean target's sum of squares
    rows: int


@dataclass(frozen=True)
class Equations:
    """What every ridge's fit (`solve`) and its choice (`choose_ridge`) share: each member's sums, and the held
    windows' (None where the ridge is not chosen, or no window is early or none held)."""

    members: list[MemberSums]
    held: Held | None


def normal_equations(
    model: ForecasterBase, windows: WindowIndex, seed: int, rows: str, choosing: bool = True
) -> Equations:
    """Each member's sums over `windows` (as `fit` reads them), which every ridge's fit (`solve`) shares, and,
    `choosing`, those that choose the ridge (`choose_ridge`: the early windows' in each member's, the held ones')."""
    if rows not in ROWS:
        raise ValueError(f"the linear candidate fits on one of {ROWS}, got {rows!r}")
    linear = shell(model.cfg, model.layout)
    offsets = linear.offsets if isinstance(linear, Ensemble) else [0]
    members = members_of(linear)
    order = torch.randperm(len(windows), generator=torch.Generator().manual_seed(seed))
    early, held = _early_and_held(windows) if choosing else (torch.zeros(len(windows), dtype=torch.bool),) * 2
    sums = [
        _sums(member, windows, order, early, offset, rows == "last_token")
        for member, offset in zip(members, offsets, strict=True)
    ]
    chooses = held.any() and all(member.early_gram.diagonal().any() for member in sums)
    held_sums = _held_sums(members, offsets, windows.subset(held)) if chooses else None
    return Equations(sums, held_sums if held_sums and held_sums.rows else None)  # no row kept: nothing scores


def solve(model: ForecasterBase, equations: Equations, ridge: float) -> ForecasterBase:
    """The linear candidate of `model` whose members' skips solve their `equations` over every window with
    `ridge` added to the Gram matrix's diagonal, relative to its mean."""
    linear = shell(model.cfg, model.layout)
    for member, sums in zip(members_of(linear), equations.members, strict=True):
        skip = member.context_skip.linear
        with torch.no_grad():
            skip.weight.copy_(_solution(sums.gram, sums.cross, ridge).T.to(skip.weight.dtype))
            skip.bias.zero_()
    return linear


def choose_ridge(equations: Equations) -> tuple[float, dict[float, float]]:
    """The ridge among LINEAR_RIDGES whose fit on the early windows forecasts the held ones best (the MSE of the
    members' mean forecast there; the smaller ridge on a tie), and each ridge's MSE; RIDGE, and no MSE, where no
    window is early or none is held (series shorter than about a horizon and a fifth)."""
    if equations.held is None:
        return RIDGE, {}
    scores = {ridge: held_mse(equations, ridge) for ridge in LINEAR_RIDGES}
    return min(LINEAR_RIDGES, key=scores.__getitem__), scores


def held_mse(equations: Equations, ridge: float) -> float:
    """The MSE on the held windows' forecast rows of the members' mean forecast, each member fitted on the early
    windows with `ridge`: from the sums alone, |Aw - b|^2 = tr(w'(A'A)w) - 2 tr(w'(A'b)) + |b|^2, A the members'
    inputs side by side and w their weights stacked over M."""
    held = equations.held
    weights = torch.cat([_solution(m.early_gram, m.early_cross, ridge) for m in equations.members])  # (S, H)
    weights = weights / len(equations.members)
    squared = (weights * (held.gram @ weights)).sum() - 2 * (weights * held.cross).sum() + held.squares
    return float(squared) / (held.rows * weights.shape[1])


def skips(linear: ForecasterBase) -> list[torch.Tensor]:
    """Each member's fitted skip weights (H, T*P): all a linear candidate holds (`from_skips` rebuilds it)."""
    return [member.context_skip.linear.weight.detach().cpu() for member in members_of(linear)]


def from_skips(cfg: ModelConfig, layout: Layout, weights: list[torch.Tensor]) -> ForecasterBase:
    """The linear candidate of a model of `cfg` with each member's skip weights (`skips`)."""
    linear = shell(cfg, layout)
    members = members_of(linear)
    if len(weights) != len(members) or any(
        w.shape != m.context_skip.linear.weight.shape for w, m in zip(weights, members, strict=False)
    ):
        raise ValueError(
            f"the linear candidate needs one skip per member, shaped {members[0].context_skip.linear.weight.shape}"
        )
    with torch.no_grad():
        for member, weight in zip(members, weights, strict=True):
            member.context_skip.linear.weight.copy_(weight)
    return linear


def _solution(gram: torch.Tensor, cross: torch.Tensor, ridge: float) -> torch.Tensor:
    """(T*P, H): the ridge solution of the normal equations, the ridge relative to the Gram matrix's mean diagonal."""
    added = ridge * gram.diagonal().mean().clamp(min=1e-12)
    return torch.linalg.solve(gram + added * torch.eye(len(gram), dtype=torch.float64), cross)


def _early_and_held(windows: WindowIndex) -> tuple[torch.Tensor, torch.Tensor]:
    """(n_windows,) bool each: the held windows, each series' last HELD_SHARE (at least one), and the early ones,
    whose targets all end before the first held window's (so no held target was fitted)."""
    _, series = torch.unique(windows.floors, return_inverse=True)  # a series' first row names it
    count = torch.bincount(series)  # (n_series,)
    by_start = torch.argsort(windows.starts, stable=True)
    by_series = by_start[torch.argsort(series[by_start], stable=True)]  # by series, then start
    rank = torch.empty_like(series)  # each window's place in its series, by start (strided windows counted as such)
    rank[by_series] = torch.arange(len(series)) - (torch.cumsum(count, 0) - count)[series[by_series]]
    n_held = torch.ceil(count * HELD_SHARE).long()[series]
    is_held = rank >= count[series] - n_held
    first_held = torch.full_like(count, torch.iinfo(torch.int64).max).scatter_reduce(
        0, series[is_held], windows.starts[is_held], "amin", include_self=True
    )[series]  # (n_windows,) its series' first held start
    return windows.starts + windows.horizon <= first_held, is_held


def _sums(
    member: Forecaster, windows: WindowIndex, order: torch.Tensor, early: torch.Tensor, offset: int, last_token: bool
) -> MemberSums:
    """The member's sums (`MemberSums`) over the windows in `order` (the member reads the context from step
    `offset`), on every token's rows or the last token's, up to MAX_ROWS rows."""
    n_inputs, n_outputs = member.context_skip.linear.in_features, member.context_skip.linear.out_features
    gram, cross, early_gram, early_cross = (
        torch.zeros(n_inputs, size, dtype=torch.float64) for size in (n_inputs, n_outputs) * 2
    )
    rows = 0
    per_window = (1 if last_token else member.n_tokens) * member.n_series * n_inputs  # (T or 1, C, T*P) of one
    batch_size = max(1, BATCH_ELEMENTS // per_window)
    with torch.no_grad():
        for first in range(0, len(order), batch_size):
            index = order[first : first + batch_size]
            inputs, targets = _rows(member, windows.take(index), windows.context_len, offset, last_token)
            gram += inputs.T @ inputs  # (T*P, T*P)
            cross += inputs.T @ targets  # (T*P, H)
            rows += len(inputs)
            if early[index].any():  # choosing the ridge: the early windows' rows again, on their own
                batch = windows.take(index[early[index]])
                inputs, targets = _rows(member, batch, windows.context_len, offset, last_token)
                early_gram += inputs.T @ inputs
                early_cross += inputs.T @ targets
            if rows >= MAX_ROWS:
                break
    return MemberSums(gram, cross, early_gram, early_cross)


def _held_sums(members: list[Forecaster], offsets: list[int], held: WindowIndex) -> Held:
    """The held windows' sums (`Held`): each member's last-token rows of the same windows, side by side."""
    width = sum(member.context_skip.linear.in_features for member in members)
    n_outputs = members[0].context_skip.linear.out_features
    gram, cross = torch.zeros(width, width, dtype=torch.float64), torch.zeros(width, n_outputs, dtype=torch.float64)
    squares, rows = torch.zeros((), dtype=torch.float64), 0
    batch_size = max(1, BATCH_ELEMENTS // (members[0].n_series * width))
    with torch.no_grad():
        for first in range(0, len(held), batch_size):
            batch = held.take(torch.arange(first, min(first + batch_size, len(held))))  # gathered once for all
            each = [
                _rows(member, batch, held.context_len, offset, True)
                for member, offset in zip(members, offsets, strict=True)
            ]
            inputs = torch.cat([inputs for inputs, _ in each], dim=1)  # (R, S): a row's every member side by side
            target = torch.stack([targets for _, targets in each]).mean(0)  # (R, H): each less its member's mean
            gram += inputs.T @ inputs
            cross += inputs.T @ target
            squares += (target**2).sum()
            rows += len(inputs)
    return Held(gram, cross, squares, rows)


def _rows(
    member: Forecaster, batch: Windows, context_len: int, offset: int, last_token: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The member's least-squares rows (`Forecaster.skip_rows`) of a gathered `batch` of windows whose contexts
    are `context_len` steps (the ensemble's; the member reads from step `offset`), in float64 (smooth
    contexts make the equations ill-conditioned): inputs (R, T*P) and targets (R, H). Every member keeps the same
    rows of the last token (a real last step, every target observed: the steps all members end on)."""
    split = batch.split(context_len)
    window = batch.target[:, offset:]  # (B, L_member + H, C): the member's context and the horizon
    observed = None if batch.observed is None else member.token_targets(batch.observed[:, offset:])
    context_observed = None if split.context_observed is None else split.context_observed[:, offset:]
    inputs, targets = member.skip_rows(
        split.context[:, offset:], context_observed, member.token_targets(window), observed, last_token
    )
    return inputs.double(), targets.double()
