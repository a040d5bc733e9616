"""Checks that the model and the data pipeline cannot see the future. Each one can fail.

Model checks run the whole forward pass in float64: changing inputs after a token's patch must
change none of the outputs at or before that token, neither in value nor through gradients.
Data checks run the real windowing code on row numbers and refit the scaler on training rows.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from tsformer.config import Config
from tsformer.data import SPLITS, Prepared, Scaler, SeriesFrame, Split, SplitBorders, WindowIndex, fill_column
from tsformer.data.prepare import scale_inputs, scale_season
from tsformer.errors import LeakageError
from tsformer.model import Covariates, Ensemble, ForecasterBase

TOLERANCE = 1e-9  # float64; a masked future contributes exactly zero in exact arithmetic


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    max_change: float
    detail: str
    skipped: bool = False  # not run (no data to run it on): proves nothing, fails nothing

    @classmethod
    def skip(cls, name: str, detail: str) -> CheckResult:
        """A check that could not run, and why."""
        return cls(name, True, 0.0, detail, skipped=True)

    def line(self) -> str:
        if self.skipped:
            return f"SKIP  {self.name:<16} {'':<18}  {self.detail}"  # the detail below PASS's
        status = "PASS" if self.passed else "FAIL"
        return f"{status}  {self.name:<16} max change {self.max_change:.1e}  {self.detail}"


def _positions(n_tokens: int) -> list[int]:
    """Tokens to probe: every token but the last (which has no future in the context)."""
    return list(range(n_tokens - 1))


def check_model(model: ForecasterBase, seed: int = 0) -> list[CheckResult]:
    """Forward, gradient, padding, inference-path, target and covariate checks on a float64 copy of `model`
    in eval mode, at every token; and the forward check again in train mode (dropout on).

    Each probe runs on the model's own weights and on a copy with every weight drawn at random, so a
    piece that starts at zero (the context skip of an untrained model) is probed too. The forward and
    gradient probes run on fully observed contexts (attention's causal-only path) and again with a
    short history in one of them (the masked path that padding takes). "Inputs after t" are the
    target and past-only covariates after t and known-future covariates after t + horizon; the
    known-future covariates in between are allowed, and `model/covariates` states it.
    """
    generator = torch.Generator().manual_seed(seed)
    own = copy.deepcopy(model).cpu().double().eval()  # the probes are made on the CPU, wherever it trained
    models = (own, _randomised(own, generator))
    cfg = own.cfg
    x = torch.randn(2, cfg.context_len, own.n_series, generator=generator, dtype=torch.float64)
    covariates = random_covariates(own, 2, generator)
    short_history = torch.ones(2, cfg.context_len, dtype=torch.bool)
    short_history[1, : cfg.context_len // 3] = False
    positions = _positions(own.n_tokens)
    probes = [
        _probe_future(probe, x, covariates, observed, positions, generator)
        for probe in models
        for observed in (None, short_history)
    ]
    worst_forward, worst_grad, moved_later = (max(values) for values in zip(*probes, strict=True))
    where = f"over {len(positions)} of {own.n_tokens} positions, own and random weights"
    results = [
        CheckResult(
            "model/forward",
            worst_forward <= TOLERANCE,
            worst_forward,
            f"outputs at or before t after changing inputs after t, {where}",
        ),
        CheckResult("model/gradient", worst_grad <= TOLERANCE, worst_grad, f"|d y<=t / d x>t|, {where}"),
        _check_train_mode(own, x, covariates, positions, generator, seed),
        CheckResult(
            "model/sensitive",
            moved_later > TOLERANCE or not positions,
            moved_later,
            "later outputs do respond to those inputs (the probe is not vacuous)",
        ),
    ]
    padding = [check_padding(probe, generator) for probe in models]
    results.append(max(padding, key=lambda r: r.max_change))
    inference = [_check_inference_path(probe, x, covariates, short_history) for probe in models]
    results += [max(inference, key=lambda r: r.max_change), check_targets(own)]
    if cfg.precision == "bfloat16":
        results.append(_check_precision(own, x, covariates, short_history, positions, generator))
    if covariates is not None and covariates.future is not None:
        results.append(_check_future_allowance(models[1], x, covariates, positions, generator))
    if own.layout.static:
        results.append(_check_static(models[1], x, covariates, generator))
    return results


def random_covariates(model: ForecasterBase, batch: int, generator: torch.Generator) -> Covariates | None:
    """Covariates of every role `model` reads (its layout), float64 (the categories as codes), or None when it
    reads none."""
    cfg, layout = model.cfg, model.layout
    if not layout.reads_covariates:
        return None
    length = cfg.context_len + cfg.horizon

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    codes = None
    if layout.static_categorical:  # 0 (unseen) .. its number of categories
        codes = torch.stack(
            [torch.randint(0, n + 1, (batch,), generator=generator) for n in layout.cardinalities], dim=1
        )
    return Covariates(
        past=normal(batch, cfg.context_len, layout.n_past) if layout.n_past else None,
        future=normal(batch, length, layout.n_future) if layout.n_future else None,
        phase=torch.randint(0, layout.cycle, (batch, length), generator=generator).double() if layout.cycle else None,
        static_values=normal(batch, len(layout.static_numeric)) if layout.static_numeric else None,
        static_codes=codes,
    )


def token_outputs(
    model: ForecasterBase, x: torch.Tensor, observed: torch.Tensor | None, covariates: Covariates | None
) -> torch.Tensor:
    """Everything each token outputs, (B, T, ...): its forecast and, with quantiles, its quantiles."""
    point, quantiles = model.outputs_tokens(x, observed, covariates)
    if quantiles is None:
        return point.flatten(2)
    return torch.cat([point.flatten(2), quantiles.flatten(2)], dim=-1)


def last_outputs(
    model: ForecasterBase, x: torch.Tensor, observed: torch.Tensor | None, covariates: Covariates | None
) -> torch.Tensor:
    """The same for the last token, through the inference path (predict, predict_quantiles): (B, ...)."""
    point = model.predict(x, observed, covariates).flatten(1)
    if model.quantile_head is None:
        return point
    return torch.cat([point, model.predict_quantiles(x, observed, covariates).flatten(1)], dim=-1)


def _randomised(model: ForecasterBase, generator: torch.Generator) -> ForecasterBase:
    """A copy with every weight drawn from N(0, 1/fan_in), so no piece of it is silent."""
    other = copy.deepcopy(model)
    with torch.no_grad():
        for weight in other.parameters():
            fan_in = weight.shape[-1] if weight.dim() > 1 else 1
            weight.copy_(torch.randn(weight.shape, generator=generator, dtype=weight.dtype) / fan_in**0.5)
    return other


def _check_inference_path(
    model: ForecasterBase, x: torch.Tensor, covariates: Covariates | None, observed: torch.Tensor
) -> CheckResult:
    """`predict` (last token only, for speed) must equal the last token of the audited all-token forward."""
    with torch.no_grad():
        change = max(
            (last_outputs(model, x, mask, covariates) - token_outputs(model, x, mask, covariates)[:, -1])
            .abs()
            .max()
            .item()
            for mask in (None, observed)
        )
    return CheckResult(
        "model/inference",
        change <= TOLERANCE,
        change,
        "forecast of predict vs the last token of the probed forward, own and random weights",
    )


def check_targets(model: ForecasterBase) -> CheckResult:
    """Every token is trained on the `horizon` steps right after its patch: token_targets on row numbers; for an
    ensemble also each member's tokens, in the ensemble's steps, as training hands them to it."""
    cfg = model.cfg
    rows = torch.arange(cfg.context_len + cfg.horizon, dtype=torch.float64)  # (L + H,) row ids as values
    window = rows[None, :, None].expand(1, -1, model.n_series)  # (1, L + H, C)
    targets = model.token_targets(window)  # (1, T, H, C)
    given = [(targets[0], model.token_ends())]  # (targets (T, H, C), first step after each token)
    if isinstance(model, Ensemble):
        for member, offset, member_targets in zip(
            model.members, model.offsets, model.member_targets(targets), strict=True
        ):
            given.append((member_targets[0], [offset + end for end in member.token_ends()]))
    change = 0.0
    for token_targets, token_ends in given:
        if token_targets.shape[0] != len(token_ends):
            change = math.inf
            continue
        ends = torch.tensor(token_ends, dtype=torch.float64)  # (T,)
        expected = (ends[:, None] + torch.arange(cfg.horizon, dtype=torch.float64))[..., None]  # (T, H, 1)
        change = max(change, (token_targets - expected).abs().max().item())
    members = f", and each of the {len(given) - 1} members' own" if len(given) > 1 else ""
    return CheckResult(
        "model/targets",
        change == 0,
        change,
        f"steps between each of the {model.n_tokens} tokens' training targets and the horizon after its patch{members}",
    )


def _after(
    x: torch.Tensor, covariates: Covariates | None, end: int, horizon: int, generator: torch.Generator
) -> tuple[torch.Tensor, Covariates | None]:
    """Copies with every input after `end` redrawn: the target and past-only covariates from step `end` on,
    known-future covariates and the cycle's phase from step `end + horizon` on (the ones before are the
    forecast's allowance); static covariates describe the series at every step and stay."""

    def redraw(t: torch.Tensor | None, start: int) -> torch.Tensor | None:
        if t is None:
            return None
        changed = t.clone()
        changed[:, start:] = 10 * torch.randn(changed[:, start:].shape, generator=generator, dtype=t.dtype)
        return changed

    if covariates is None:
        return redraw(x, end), None
    changed = covariates._replace(  # drawn before the target, as the probes always have been
        past=redraw(covariates.past, end),
        future=redraw(covariates.future, end + horizon),
        phase=redraw(covariates.phase, end + horizon),
    )
    return redraw(x, end), changed


def _check_train_mode(
    model: ForecasterBase,
    x: torch.Tensor,
    covariates: Covariates | None,
    positions: list[int],
    generator: torch.Generator,
    seed: int,
) -> CheckResult:
    """The forward probe in train mode: dropout on, with the same masks in every pass (the RNG seeded alike
    before each), so a leak that only training's path has (one that dropout switches on) shows too."""
    ends, horizon = model.token_ends(), model.cfg.horizon

    def outputs(inputs: torch.Tensor, covs: Covariates | None) -> torch.Tensor:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            return token_outputs(model, inputs, None, covs)

    model.train()
    try:
        base, worst = outputs(x, covariates), 0.0
        for k in positions:
            changed, changed_covariates = _after(x, covariates, ends[k], horizon, generator)
            worst = max(worst, (outputs(changed, changed_covariates)[:, : k + 1] - base[:, : k + 1]).abs().max().item())
    finally:
        model.eval()
    return CheckResult(
        "model/train-mode",
        worst <= TOLERANCE,
        worst,
        f"outputs at or before t in train mode (dropout on, the same masks) after changing inputs after t, over "
        f"{len(positions)} of {model.n_tokens} positions, own weights",
    )


def _probe_future(
    probe: ForecasterBase,
    x: torch.Tensor,
    covariates: Covariates | None,
    observed: torch.Tensor | None,
    positions: list[int],
    generator: torch.Generator,
) -> tuple[float, float, float]:
    """Largest change of outputs at or before each token k, in value and gradient, after changing the
    inputs after k; and the largest change of the outputs after k (which must respond)."""
    ends, horizon = probe.token_ends(), probe.cfg.horizon
    with torch.no_grad():
        base = token_outputs(probe, x, observed, covariates)  # (B, T, ...)
    worst_forward, worst_grad, moved_later = 0.0, 0.0, 0.0
    for k in positions:
        changed, changed_covariates = _after(x, covariates, ends[k], horizon, generator)
        with torch.no_grad():
            out = token_outputs(probe, changed, observed, changed_covariates)
        worst_forward = max(worst_forward, (out[:, : k + 1] - base[:, : k + 1]).abs().max().item())
        moved_later = max(moved_later, (out[:, k + 1 :] - base[:, k + 1 :]).abs().max().item())
        inputs = [x.clone().requires_grad_(True)]
        grad_covariates, starts = None, []  # per time-indexed covariate role: the first step it may not move
        if covariates is not None:
            timed = {"past": ends[k], "future": ends[k] + horizon}  # the phase is a code: no gradient
            grad_covariates = covariates._replace(
                **{role: getattr(covariates, role).clone().requires_grad_(True)
                   for role in timed if getattr(covariates, role) is not None}
            )  # fmt: skip
            for role, start in timed.items():
                if getattr(grad_covariates, role) is not None:
                    inputs.append(getattr(grad_covariates, role))
                    starts.append(start)
        past_outputs = token_outputs(probe, inputs[0], observed, grad_covariates)[:, : k + 1]
        grads = torch.autograd.grad(past_outputs.sum(), inputs, allow_unused=True)
        worst_grad = max(worst_grad, grads[0][:, ends[k] :].abs().max().item())
        for grad, start in zip(grads[1:], starts, strict=True):
            if grad is not None and grad[:, start:].numel():
                worst_grad = max(worst_grad, grad[:, start:].abs().max().item())
    return worst_forward, worst_grad, moved_later


def _check_precision(
    model: ForecasterBase,
    x: torch.Tensor,
    covariates: Covariates | None,
    observed: torch.Tensor,
    positions: list[int],
    generator: torch.Generator,
) -> CheckResult:
    """The forward and gradient probes again in float32, where a bfloat16 model's products run in bfloat16 (in
    float64 they run exactly): a masked future still contributes exactly zero, so nothing may move."""
    own = copy.deepcopy(model).float().eval()
    models = (own, _randomised(own, generator))
    as_float = None
    if covariates is not None:
        as_float = Covariates(*(t if t is None or not t.is_floating_point() else t.float() for t in covariates))
    probes = [
        _probe_future(probe, x.float(), as_float, mask, positions, generator)
        for probe in models
        for mask in (None, observed)
    ]
    worst = max(max(forward, grad) for forward, grad, _ in probes)
    return CheckResult(
        "model/bfloat16",
        worst <= TOLERANCE,
        worst,
        f"outputs and gradients at or before t after changing inputs after t, with the products in bfloat16 "
        f"(as trained), over {len(positions)} positions, own and random weights",
    )


def _check_future_allowance(
    model: ForecasterBase, x: torch.Tensor, covariates: Covariates, positions: list[int], generator: torch.Generator
) -> CheckResult:
    """Known-future covariates in (t, t + horizon] may move token t's forecast (they are known when it is
    made): with random weights they must, or the model ignores them; the forward check holds the rest."""
    ends, horizon = model.token_ends(), model.cfg.horizon
    moved = 0.0
    with torch.no_grad():
        base = model.forecast_tokens(x, None, covariates)
        for k in positions or [model.n_tokens - 1]:
            future = covariates.future.clone()
            window = future[:, ends[k] : ends[k] + horizon]
            future[:, ends[k] : ends[k] + horizon] = window + 10 * torch.randn(
                window.shape, generator=generator, dtype=window.dtype
            )
            out = model.forecast_tokens(x, None, covariates._replace(future=future))
            moved = max(moved, (out[:, k] - base[:, k]).abs().max().item())
    return CheckResult(
        "model/covariates",
        moved > TOLERANCE,
        moved,
        f"token t's forecast responds to the {model.n_future} known-future covariates in (t, t + {horizon}] "
        "(allowed: known when the forecast is made; later ones are held fixed by model/forward)",
    )


def _check_static(
    model: ForecasterBase, x: torch.Tensor, covariates: Covariates, generator: torch.Generator
) -> CheckResult:
    """Static covariates describe a series at every step, so every token may read them: with random weights the
    forecast must respond to them (or the model ignores them); the forward check holds them fixed."""
    layout, values, codes = model.layout, covariates.static_values, covariates.static_codes
    if values is not None:
        values = values + 10 * torch.randn(values.shape, generator=generator, dtype=torch.float64)
    if codes is not None:  # every category moved to the next one (the unseen code 0 included)
        codes = (codes + 1) % (torch.tensor(layout.cardinalities) + 1)
    changed = covariates._replace(static_values=values, static_codes=codes)
    with torch.no_grad():
        moved = (model.forecast_tokens(x, None, changed) - model.forecast_tokens(x, None, covariates)).abs().max()
    return CheckResult(
        "model/static",
        moved.item() > TOLERANCE,
        moved.item(),
        f"every token's forecast responds to the {len(layout.static)} static covariates ({', '.join(layout.static)}; "
        "allowed: one value per series, constant in time)",
    )


def check_padding(model: ForecasterBase, generator: torch.Generator) -> CheckResult:
    """Values in masked cells (left padding, and unobserved cells inside the history) change no forecast."""
    cfg = model.cfg
    shape = (2, cfg.context_len, model.n_series)
    x = torch.randn(shape, generator=generator, dtype=torch.float64)
    covariates = random_covariates(model, 2, generator)
    history = max(1, cfg.context_len // 3)
    observed = torch.rand(shape, generator=generator) > 0.2  # (2, L, C): a fifth of the cells unobserved
    observed[:, :-history] = False  # and the left padding of a short history
    other = torch.where(observed, x, 1e3 * torch.randn(shape, generator=generator, dtype=torch.float64))
    with torch.no_grad():
        change = max(
            (last_outputs(model, x, observed, covariates) - last_outputs(model, other, observed, covariates))
            .abs()
            .max()
            .item(),
            (token_outputs(model, x, observed, covariates) - token_outputs(model, other, observed, covariates))
            .abs()
            .max()
            .item(),
        )
    return CheckResult(
        "model/masked",
        change <= TOLERANCE,
        change,
        f"forecasts after changing the {int((~observed).sum())} padded or unobserved cells",
    )


def check_intervals(
    half_widths_of: Callable[[Split], np.ndarray | None], context_len: int, horizon: int, n_series: int
) -> CheckResult:
    """The intervals' half-widths of random windows (`half_widths_of`: a run's, (levels, N or 1, H, C)) are
    unchanged when every target after the origin is redrawn: a width may read the context only."""
    generator = torch.Generator().manual_seed(0)
    context = torch.randn(8, context_len, n_series, generator=generator)  # (N, L, C)
    windows = Split(context, torch.randn(8, horizon, n_series, generator=generator), None, None, None)
    before = half_widths_of(windows)
    if before is None:
        return CheckResult("intervals/future", True, 0.0, "the run has no intervals")
    redrawn = windows._replace(target=100 * torch.randn(8, horizon, n_series, generator=generator))
    change = float(np.abs(half_widths_of(redrawn) - before).max())
    return CheckResult(
        "intervals/future", change <= TOLERANCE, change, "interval half-widths after redrawing every target"
    )


def check_scaler(frame: SeriesFrame, borders: SplitBorders, scaler: Scaler, season: int = 0) -> CheckResult:
    """The scaler's statistics (mean, scale and the lowest value, which sets the forecasts' floor) must be those
    of each series' training rows alone (targets and covariates), recomputed here with pandas: a series with no
    training value in a column has those of every series'."""
    inputs = frame.inputs() if frame.id_cols else frame.inputs()[: int(borders.train_end[0])]
    ids = frame.id_of_rows() if frame.id_cols else np.zeros(len(inputs), dtype=np.int64)
    position = np.arange(len(inputs)) - frame.bounds[ids]  # row within its series
    training = pd.DataFrame(inputs[position < borders.train_end[ids]].astype(np.float64))
    groups = training.groupby(ids[position < borders.train_end[ids]])
    mean = groups.mean().reindex(range(frame.n_ids))  # (n_ids, n_inputs), NaN: no training value
    std = groups.std(ddof=0).reindex(range(frame.n_ids))
    mean = mean.fillna(training.mean()).fillna(0.0).to_numpy()
    std = std.fillna(training.std(ddof=0)).to_numpy()
    if season:  # data.scale=seasonal: the mean absolute change over one season within each series
        series = pd.Series(ids[position < borders.train_end[ids]])
        lengths = series.value_counts().reindex(range(frame.n_ids), fill_value=0).to_numpy()
        change = pd.DataFrame(index=range(frame.n_ids), columns=training.columns, dtype=float)
        for i in range(frame.n_ids):
            rows = training[(series == i).to_numpy()]
            lag = season if season < lengths[i] else 1
            change.loc[i] = (rows - rows.shift(lag)).abs().mean().to_numpy()
        change = change.to_numpy(dtype=float)
        std = np.where(np.isfinite(change) & (change > 1e-12), change, std)
    std = np.where(std > 1e-12, std, 1.0)
    lowest = groups.min().reindex(range(frame.n_ids)).fillna(training.min()).to_numpy()  # NaN: no training value
    if mean.shape != scaler.mean.shape:
        detail = f"scaler of shape {scaler.mean.shape} for data of {mean.shape}"
        return CheckResult("data/scaler", False, math.inf, detail)
    change = float(max(np.abs(mean - scaler.mean).max(), np.abs(std - scaler.std).max()))
    if scaler.lowest is not None:  # the forecasts' floor (`Scaler.floors`): NaN where both have none
        gap = np.where(np.isnan(lowest) & np.isnan(scaler.lowest), 0.0, np.abs(lowest - scaler.lowest))
        change = max(change, float(np.nan_to_num(gap, nan=math.inf).max()))
    tolerance = 1e-5 * float(max(1.0, np.abs(mean).max(), std.max()))
    where = (
        f"each of {frame.n_ids} series' training rows"
        if frame.id_cols
        else (f"training rows 0..{int(borders.train_end[0]) - 1}")
    )
    return CheckResult("data/scaler", change <= tolerance, change, f"scaler vs. statistics of {where}")


WINDOW_SAMPLE = 100_000  # windows per split gathered on row numbers (all of them when fewer); the rest by arithmetic
WINDOW_CHUNK = 4096


def check_windows(data: Prepared) -> list[CheckResult]:
    """Run the real windowing on row numbers: targets stay in their split and their series, after their
    inputs (and the padding before a short series), covariates are read only where allowed, and no
    series has a target timestamp in two splits.

    Every window's rows are checked by arithmetic on the real window index; the real gather runs on
    row numbers for every window of a split, or for WINDOW_SAMPLE evenly spaced ones when there are
    more (memory stays bounded for millions of windows)."""
    frame, borders = data.frame, data.borders
    ids = frame.id_of_rows()
    rows = data.inputs.row_numbers()  # every role's cells hold their row number
    covered: dict[str, np.ndarray] = {}
    worst_overlap, outside, covariates_ahead, gathered = 0, 0, 0, 0
    path_cells, path_windows = 0, 0  # cells where the fast (unfold) path and the gather differ; windows compared
    for split in SPLITS:
        index = dataclasses.replace(data.split_windows(split), inputs=rows)
        differ, compared = _paths_differ(index)
        path_cells, path_windows = path_cells + differ, path_windows + compared
        starts, floors = index.starts.numpy(), index.floors.numpy()
        horizon, context_len = index.horizon, index.context_len
        series = index.series()  # (N,)
        first, end = borders.target_range(split)
        within = starts - floors
        outside += int(((within < first[series]) | (within + horizon > end[series])).sum())
        outside += int((floors != frame.bounds[series]).sum())  # a window's floor is its series' first row
        sample = np.arange(len(starts))
        if len(sample) > WINDOW_SAMPLE:
            sample = np.unique(np.linspace(0, len(starts) - 1, WINDOW_SAMPLE).round().astype(np.int64))
        gathered += len(sample)
        for chunk in range(0, len(sample), WINDOW_CHUNK):
            windows = index.take(torch.from_numpy(sample[chunk : chunk + WINDOW_CHUNK])).split(context_len)
            overlap, ahead, mixed = _window_rows(windows, ids)
            worst_overlap, covariates_ahead, outside = (
                max(worst_overlap, overlap),
                covariates_ahead + ahead,
                outside + mixed,
            )
        hits = np.zeros(frame.n_rows + 1, dtype=np.int64)  # rows each split forecasts: +1 at a start, -1 after its end
        np.add.at(hits, starts, 1)
        np.add.at(hits, np.minimum(starts + horizon, frame.n_rows), -1)
        covered[split] = np.flatnonzero(np.cumsum(hits)[:-1] > 0)
    # (series, timestamp) of each row as one int64: the series, then the timestamp's rank among the file's
    # (a structured array of pairs sorts 50 times slower: 5.5 s on 1.4 M rows)
    _, time_rank = np.unique(frame.timestamps.as_unit("ns").asi8, return_inverse=True)
    pairs = ids.astype(np.int64) * (frame.n_rows + 1) + time_rank.reshape(-1)
    shared = 0
    for i, a in enumerate(SPLITS):
        for b in SPLITS[i + 1 :]:
            shared += len(np.intersect1d(pairs[covered[a]], pairs[covered[b]]))
    return [
        CheckResult(
            "data/window-paths",
            path_cells == 0,
            float(path_cells),
            f"cells where the fast path (windows as views through unfold, as validation, the fallback, the "
            f"intervals and evaluate take them) differs from the gather, on row numbers; {path_windows:,} windows",
        ),
        CheckResult(
            "data/window",
            worst_overlap == 0 and covariates_ahead == 0,
            float(worst_overlap + covariates_ahead),
            f"steps a window's target shares with its own input ({worst_overlap}), covariate cells read after the "
            f"origin (past-only) or after the horizon (known-future) ({covariates_ahead}); {gathered:,} windows "
            "gathered on row numbers",
        ),
        CheckResult(
            "data/splits",
            shared == 0 and outside == 0,
            float(shared + outside),
            f"(series, target timestamp) pairs in two splits ({shared}) or outside their split or series ({outside})",
        ),
    ]


def _window_rows(windows, ids: np.ndarray) -> tuple[int, int, int]:
    """Of windows gathered from row numbers: the most target steps shared with the window's own input, the
    covariate cells read after the origin (past-only) or the horizon (known-future), and the cells read
    from another series (static covariates: the series they were gathered from)."""
    inputs, targets = windows.context[..., 0].long(), windows.target[..., 0].long()  # (N, L), (N, H)
    if windows.context_observed is not None:  # padding (before a series' first row) reads nothing
        inputs = torch.where(windows.context_observed[..., 0], inputs, torch.full_like(inputs, -1))
    if not len(targets):
        return 0, 0, 0
    overlap = int((inputs.max(1).values - targets.min(1).values + 1).clamp(min=0).max())
    ahead = 0
    if windows.covariates is not None:
        origin, end = targets[:, :1], targets[:, -1:]  # (N, 1): the first and last target row
        past, future, phase = windows.covariates.past, windows.covariates.future, windows.covariates.phase
        if past is not None:  # past-only covariates: rows before the origin only
            ahead += int((past.long() >= origin.unsqueeze(-1)).sum())
        if future is not None:  # known-future ones: up to the last step forecast, not beyond
            ahead += int((future.long() > end.unsqueeze(-1)).sum())
        if phase is not None:  # the cycle's phase is known-future too
            ahead += int((phase.long() > end).sum())
    ids = torch.from_numpy(ids)
    series = ids[targets[:, :1]]  # (N, 1) the series of each window's first target
    mixed = (ids[targets] != series).sum() + ((ids[inputs.clamp(min=0)] != series) & (inputs >= 0)).sum()
    if windows.covariates is not None:  # static covariates: the window's own series', nobody else's
        for static in (windows.covariates.static_values, windows.covariates.static_codes):
            if static is not None:
                mixed += (static.long() != series).sum()
    return overlap, ahead, int(mixed)


def check_fill(frame: SeriesFrame, method: str, n_origins: int = 32) -> CheckResult:
    """Filled cells come from earlier rows only: refilling after changing every observed value from an
    origin on must leave all rows before the origin as the loader filled them."""
    if frame.observed.all() or not method:
        detail = "no cell was missing" if frame.observed.all() else "no cell was filled: unobserved cells are masked"
        return CheckResult("data/fill", True, 0.0, detail)
    raw = np.where(frame.observed, frame.values, np.nan).astype(np.float64)  # (n_rows, n_series)

    def refill(values: np.ndarray) -> np.ndarray:
        return np.stack([fill_column(values[:, j], method) for j in range(values.shape[1])], axis=1)

    worst = float(np.abs(refill(raw) - frame.values).max())  # the real loader's fill, recomputed
    gap_ends = np.unique(np.nonzero(~frame.observed)[0]) + 1  # just after a filled cell: a fill from later rows shows
    picks = np.linspace(0, len(gap_ends) - 1, min(n_origins, len(gap_ends))).round().astype(int)
    rng = np.random.default_rng(0)
    for origin in gap_ends[picks]:
        changed = raw.copy()
        later = changed[origin:]
        changed[origin:] = np.where(np.isnan(later), np.nan, 1e3 * rng.standard_normal(later.shape))
        worst = max(worst, float(np.abs(refill(changed)[:origin] - frame.values[:origin]).max(initial=0.0)))
    return CheckResult(
        "data/fill",
        worst <= 1e-4 * float(max(1.0, np.abs(frame.values).max())),
        worst,
        f"filled rows before an origin after changing every later value, {len(picks)} origins ({method})",
    )


def _paths_differ(index: WindowIndex) -> tuple[int, int]:
    """A block of up to WINDOW_CHUNK consecutive, unpadded windows of one series of `index` (row numbers), taken
    by `WindowIndex.all` (unfold: views) and by the gather: the cells where they differ, and the windows."""
    starts, floors = index.starts, index.floors
    usable = (starts - index.context_len >= floors).numpy()  # unpadded
    if not usable.any():
        return 0, 0
    first = int(np.flatnonzero(usable)[len(np.flatnonzero(usable)) // 2])  # from the middle of the split
    end = first + 1
    while end < len(starts) and end - first < WINDOW_CHUNK and usable[end] and starts[end] == starts[end - 1] + 1:
        end += 1  # consecutive starts in the same series (a new series' floor breaks the run)
    block = index.subset(torch.arange(first, end))
    fast = block.all()
    slow = block.inputs.gather(block.starts, block.floors, block.context_len, block.horizon)
    differ = 0
    for role in ("target", "observed", "past", "future", "phase"):
        a, b = getattr(fast, role), getattr(slow, role)
        if (a is None) != (b is None) or (a is not None and a.shape != b.shape):
            differ += max(1, 0 if b is None else b.numel())  # a role missing, or windows of another shape
        elif a is not None:
            differ += int((a != b).sum())
    return differ, end - first


def check_scaled_inputs(data: Prepared, n_origins: int = 16) -> CheckResult:
    """The scaling the model's inputs go through (`scale_inputs`, the one path), on the real rows: after every raw
    value after an origin is redrawn (targets and covariates), the scaled inputs at or before it must be as they
    were; `n_origins` origins spread over all rows, each probed on the rows a window around it reads (its
    series' context + horizon before and after it), so the cost does not grow with the file."""
    frame = data.frame
    span = data.config.model.context_len + data.config.model.horizon
    rng = np.random.default_rng(0)
    ids = frame.id_of_rows()
    worst = 0.0
    origins = np.unique(np.linspace(0, max(frame.n_rows - 2, 0), n_origins).round().astype(np.int64))
    for row in origins:
        i = int(ids[row])
        first, end = max(int(frame.bounds[i]), row + 1 - span), min(int(frame.bounds[i + 1]), row + 1 + span)
        piece = _series_rows(frame, i, first, end)
        scaler = data.scaler.rows(slice(i, i + 1))
        kept = row + 1 - first  # the piece's rows up to the origin; the rest are redrawn
        changed = redrawn_rows(piece, np.arange(end - first) >= kept, scaler, rng)
        base, inputs = (scale_inputs(f, data.layout, scaler, data.static_scale) for f in (piece, changed))
        for role in ("target", "past", "future", "phase"):
            before, after = getattr(base, role), getattr(inputs, role)
            if before is not None:
                worst = max(worst, float((after[:kept] - before[:kept]).abs().max()))
    return CheckResult(
        "data/scaled",
        worst == 0.0,
        worst,
        f"scaled inputs at or before an origin after redrawing every raw value after it, {len(origins)} origins",
    )


def _series_rows(frame: SeriesFrame, i: int, first: int, end: int) -> SeriesFrame:
    """Rows first..end - 1 (of the stacked rows, all of series `i`) as a frame of that one series."""
    return frame.with_rows(
        slice(first, end),
        np.array([end - first]),
        keys=(frame.keys[i],),
        id_values=None if frame.id_values is None else frame.id_values.iloc[[i]].reset_index(drop=True),
        static=None if frame.static is None else frame.static.iloc[[i]].reset_index(drop=True),
    )


def redrawn_rows(frame: SeriesFrame, later: np.ndarray, scaler: Scaler, rng: np.random.Generator) -> SeriesFrame:
    """`frame` with every value (targets and covariates) of the rows `later` (n_rows,) bool redrawn as noise of a
    thousand scales about its series' training mean (`scaler`: one row per series of `frame`). Far from any real
    value, yet in the data's own units, so it stays inside what the data guard (`prepare.MAX_STANDARD_DEVIATIONS`)
    accepts for a column of any size (a rate of 0.01 as much as a meter reading of 25 million)."""
    ids = frame.id_of_rows()
    mean, std = scaler.mean[ids], scaler.std[ids]  # (n_rows, n_inputs): targets, past-only, known-future
    n_targets, n_past = frame.values.shape[1], 0 if frame.past is None else frame.past.shape[1]

    def redrawn(block: np.ndarray | None, columns: slice) -> np.ndarray | None:
        if block is None:
            return None
        spread = std[:, columns].astype(np.float64) * rng.standard_normal(block.shape)
        noise = mean[:, columns].astype(np.float64) + 1e3 * spread
        largest = float(np.finfo(block.dtype).max)  # a column of 1e36 stays finite in float32
        return np.where(later[:, None], np.clip(noise, -largest, largest).astype(block.dtype), block)

    return dataclasses.replace(
        frame,
        values=redrawn(frame.values, slice(0, n_targets)),
        past=redrawn(frame.past, slice(n_targets, n_targets + n_past)),
        future=redrawn(frame.future, slice(n_targets + n_past, None)),
    )


def check_static(data: Prepared) -> CheckResult:
    """The static covariates' roles, categories and scale must be those of the series that exist by the training
    end (their first row no later than any series' last training row), recomputed here with pandas: a series that
    starts after it (a product launched in the test months) may not add a category or move the scale."""
    frame, layout, borders, name = data.frame, data.layout, data.borders, "data/static"
    if frame.static is None:
        return CheckResult(name, True, 0.0, "no static covariates")
    starts = pd.Series(frame.timestamps[frame.bounds[:-1]])
    trained = borders.train_end > 0
    training_ends = pd.Series(frame.timestamps[frame.bounds[:-1][trained] + borders.train_end[trained] - 1])
    rows = frame.static[(starts <= training_ends.max()).to_numpy()]  # the series that exist by the training end
    text = {c: rows[c].map(lambda v: str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)) for c in rows}
    numbers = {c: pd.to_numeric(text[c], errors="coerce") for c in rows}
    numeric = tuple(c for c in rows if np.isfinite(numbers[c].to_numpy(np.float64)).all())  # NaN: not a number
    categorical = tuple((c, tuple(sorted(set(text[c])))) for c in rows if c not in numeric)
    found, stored = dict(categorical), dict(layout.static_categorical)
    if numeric != layout.static_numeric or found != stored:
        differ = [c for c in rows if (c in numeric) != (c in layout.static_numeric) or found.get(c) != stored.get(c)]
        return CheckResult(
            name,
            False,
            math.inf,
            f"static covariate {differ[0]!r} has another role or other categories than the {len(rows)} series that "
            f"exist by the training end give it (stored: {stored.get(differ[0], 'numeric')}; theirs: "
            f"{found.get(differ[0], 'numeric')}): a series that starts later set it",
        )
    change = 0.0
    if numeric:
        values = rows[list(numeric)].astype(np.float64)
        std = values.std(ddof=0).to_numpy()
        mean, std = values.mean().to_numpy(), np.where(std > 1e-12, std, 1.0)
        change = float(max(np.abs(mean - data.static_scale.mean).max(), np.abs(std - data.static_scale.std).max()))
    return CheckResult(
        name,
        change <= 1e-9 * max(1.0, float(np.abs(data.static_scale.mean).max())) if numeric else True,
        change,
        f"static roles, categories and scale vs. those of the {len(rows)} series that exist by the training end",
    )


def check_roles(data: Prepared, cfg: Config) -> CheckResult:
    """Each covariate reads in the role the config declares: a past-only covariate read as known-future would
    give the model its values over the horizon."""
    layout = data.layout
    declared = (tuple(cfg.data.past_covs), tuple(cfg.data.future_covs))
    same = (layout.past, layout.future) == declared and (layout.cycle or 0) == (cfg.model.cycle or 0)
    return CheckResult(
        "data/roles",
        same,
        0.0 if same else math.inf,
        f"past-only {list(layout.past)} and known-future {list(layout.future)} covariates as the config declares them",
    )


def check_data(data: Prepared, cfg: Config) -> list[CheckResult]:
    """Every data check: fills, the scaler, the covariates' roles and static scale, the scaled inputs, then the
    windows and splits."""
    frame = data.frame
    return [
        check_fill(frame, cfg.data.fill),
        check_scaler(frame, data.borders, data.scaler, scale_season(cfg, frame.freq)),
        check_roles(data, cfg),
        check_static(data),
        check_scaled_inputs(data),
        *check_windows(data),
    ]


def require_passed(results: list[CheckResult]) -> None:
    failed = [r for r in results if not r.passed]
    if failed:
        names = ", ".join(f"{r.name} (max change {r.max_change:.1e})" for r in failed)
        raise LeakageError(f"leakage check failed: {names}; the model or pipeline can see the future")
