"""The least-squares start: the model as its context skip alone, the skip fitted in closed form.

The context skip (`forecaster.ContextSkip`) maps each token's standardised context linearly to the H steps after
it. Fitted by least squares on the training windows (every token, as the loss trains them, each row weighing as
the MSE weighs it) it is a strong linear autoregression that stochastic training of the whole model does not
always reach: on a panel of short annual trends (the World Bank's fertility rates, 219 countries) it scored a
seventh of the trained model's validation error (benchmarks/NOTES.md, session 38). So training scores it as
epoch 0 (`train.least_squares_start`): the model with the fitted skip and every other output path (the
Transformer's head, the future skip, the learned cycle) at zero. It ships where no trained epoch beats it on
validation, and the final fit then repeats the fit on every row instead of any optimiser step.

It reads the windows it is given (the training split's), nothing else.
"""

from __future__ import annotations

import copy

import torch

from tsformer.data.windows import WindowIndex
from tsformer.model.ensemble import Ensemble
from tsformer.model.forecaster import Forecaster
from tsformer.model.inference import ForecasterBase

MAX_ROWS = 1 << 18  # rows (a token of a sequence) the normal equations sum at most, from windows drawn at random
RIDGE = 1e-4  # added to the Gram matrix's diagonal, relative to its mean: a tie-breaker, not a prior
BATCH_ELEMENTS = 1 << 21  # the skip's inputs held at once (8 MiB of float32), whatever the series and context


def members_of(model: ForecasterBase) -> list[Forecaster]:
    """An ensemble's members, or the model itself."""
    return list(model.members) if isinstance(model, Ensemble) else [model]


def applies(model: ForecasterBase) -> bool:
    """Whether the model has a least-squares start: every member a context skip and no quantile head (whose
    offsets would all be zero)."""
    return all(m.context_skip is not None and m.quantile_head is None for m in members_of(model))


def least_squares_start(model: ForecasterBase, windows: WindowIndex, seed: int) -> ForecasterBase:
    """A copy of `model` (in eval mode) at the least-squares start, fitted on `windows` (at most MAX_ROWS rows
    of them, the windows drawn in an order fixed by `seed`); `model` is left as it was."""
    start = copy.deepcopy(model).cpu().eval()
    offsets = start.offsets if isinstance(start, Ensemble) else [0]
    order = torch.randperm(len(windows), generator=torch.Generator().manual_seed(seed))
    for member, offset in zip(members_of(start), offsets, strict=True):
        _fit_skip(member, windows, order, offset)
        _zero_other_outputs(member)
    return start


def _fit_skip(member: Forecaster, windows: WindowIndex, order: torch.Tensor, offset: int) -> None:
    """The member's context skip set to the least-squares solution over the windows in `order` (the member reads
    the context from step `offset`)."""
    skip = member.context_skip.linear
    n_inputs = skip.in_features
    gram = torch.zeros(n_inputs, n_inputs, dtype=torch.float64)
    cross = torch.zeros(n_inputs, skip.out_features, dtype=torch.float64)
    rows = 0
    per_window = member.n_tokens * member.n_series * n_inputs  # (T, C, T*P) inputs of one window
    batch_size = max(1, BATCH_ELEMENTS // per_window)
    with torch.no_grad():
        for first in range(0, len(order), batch_size):
            batch = windows.take(order[first : first + batch_size])
            split = batch.split(windows.context_len)
            window = batch.target[:, offset:]  # (B, L_member + H, C): the member's context and the horizon
            observed = None if batch.observed is None else member.token_targets(batch.observed[:, offset:])
            context_observed = None if split.context_observed is None else split.context_observed[:, offset:]
            inputs, targets = member.skip_rows(
                split.context[:, offset:], context_observed, member.token_targets(window), observed
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


def _zero_other_outputs(member: Forecaster) -> None:
    """Every path to the forecast but the context skip at zero: the Transformer's head (so its states, whatever
    they are, add nothing), the future skip and the learned cycle."""
    with torch.no_grad():
        for module in (member.head.out if member.head is not None else None, member.future_skip, member.cycle):
            for parameter in () if module is None else module.parameters():
                parameter.zero_()
