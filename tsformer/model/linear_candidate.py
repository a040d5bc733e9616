"""The linear candidate: the model's context skip alone, fitted by least squares on the training windows.

The context skip (`forecaster.ContextSkip`) maps each token's standardised context linearly to the H steps after
it. Fitted in closed form on the training windows (every token, as the loss trains them, each row weighing as
the MSE weighs it) it is a strong linear autoregression that stochastic training of the whole model does not
always reach: on a panel of short annual trends (the World Bank's fertility rates, 219 countries) it scored a
seventh of the trained model's validation error, and on ETTh1 it wins validation on some columns
(benchmarks/NOTES.md, sessions 38 and 39). So it is a candidate beside the model (`linear` in train.candidates):
the fallback (`tsformer.fallback`) weighs it per series and column on validation like any other, and the final
fit (`tsformer.final`) fits it again on every row.

It is a model of the same context, patches and tokens without the Transformer (`model.transformer` false), so
forecasting it costs the skip alone; its future skip and learned cycle stay at zero. It reads the windows it is
given (the training split's), nothing else: `tsformer check` (linear/rows) proves it.
"""

from __future__ import annotations

import dataclasses

import torch

from tsformer.config import LINEAR_ROWS, ModelConfig
from tsformer.data.windows import WindowIndex
from tsformer.layout import Layout
from tsformer.model.ensemble import Ensemble, build_forecaster
from tsformer.model.forecaster import Forecaster
from tsformer.model.inference import ForecasterBase

# rows (a token of a sequence) the normal equations sum at most, from windows drawn at random: every token of every
# ETTh1 training window (about 800,000) and a third of M4 Hourly's, which scored better on validation than 2^18
# (NOTES, session 39); one row per window and sequence on the last token's rows, so every window of both
MAX_ROWS = 1 << 20
RIDGE = 1e-4  # added to the Gram matrix's diagonal, relative to its mean: a tie-breaker, not a prior
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


def fit(model: ForecasterBase, windows: WindowIndex, seed: int, rows: str = "every_token") -> ForecasterBase:
    """The linear candidate of `model` fitted on `windows` (at most MAX_ROWS rows of them, the windows drawn in an
    order fixed by `seed`), on the CPU, on the `rows` of each (ROWS); `model` itself is only read for its
    configuration and layout."""
    if rows not in ROWS:
        raise ValueError(f"the linear candidate fits on one of {ROWS}, got {rows!r}")
    linear = shell(model.cfg, model.layout)
    offsets = linear.offsets if isinstance(linear, Ensemble) else [0]
    order = torch.randperm(len(windows), generator=torch.Generator().manual_seed(seed))
    for member, offset in zip(members_of(linear), offsets, strict=True):
        _fit_skip(member, windows, order, offset, rows == "last_token")
    return linear


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


def _fit_skip(member: Forecaster, windows: WindowIndex, order: torch.Tensor, offset: int, last_token: bool) -> None:
    """The member's context skip set to the least-squares solution over the windows in `order` (the member reads
    the context from step `offset`), on every token's rows or the last token's."""
    skip = member.context_skip.linear
    n_inputs = skip.in_features
    gram = torch.zeros(n_inputs, n_inputs, dtype=torch.float64)
    cross = torch.zeros(n_inputs, skip.out_features, dtype=torch.float64)
    rows = 0
    per_window = (1 if last_token else member.n_tokens) * member.n_series * n_inputs  # (T or 1, C, T*P) of one
    batch_size = max(1, BATCH_ELEMENTS // per_window)
    with torch.no_grad():
        for first in range(0, len(order), batch_size):
            batch = windows.take(order[first : first + batch_size])
            split = batch.split(windows.context_len)
            window = batch.target[:, offset:]  # (B, L_member + H, C): the member's context and the horizon
            observed = None if batch.observed is None else member.token_targets(batch.observed[:, offset:])
            context_observed = None if split.context_observed is None else split.context_observed[:, offset:]
            inputs, targets = member.skip_rows(
                split.context[:, offset:], context_observed, member.token_targets(window), observed, last_token
            )
            inputs, targets = inputs.double(), targets.double()  # float64: smooth contexts make it ill-conditioned
            gram += inputs.T @ inputs  # (T*P, T*P)
            cross += inputs.T @ targets  # (T*P, H)
            rows += len(inputs)
            if rows >= MAX_ROWS:
                break
    ridge = RIDGE * gram.diagonal().mean().clamp(min=1e-12)
    solution = torch.linalg.solve(gram + ridge * torch.eye(n_inputs, dtype=torch.float64), cross)  # (T*P, H)
    with torch.no_grad():
        skip.weight.copy_(solution.T.to(skip.weight.dtype))
        skip.bias.zero_()
