"""`check_predictor`: every leakage check on a trained predictor and the data it reads."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from tsformer.backtest import origin_windows, score_origins
from tsformer.calibration import choose_and_calibrate, fit_linear
from tsformer.data import Prepared, SeriesFrame, WindowIndex
from tsformer.errors import ConfigError, DataError
from tsformer.fallback import BASE, Weights
from tsformer.final import last_timestamps
from tsformer.leakage import CheckResult, check_data, check_intervals, check_model, redrawn_rows
from tsformer.model import linear_candidate

if TYPE_CHECKING:
    from tsformer.predictor import Predictor


def check_predictor(
    predictor: Predictor, data: Prepared | None, report: Callable[[CheckResult], None] | None = None
) -> list[CheckResult]:
    """The model checks on the assembled model, the intervals' checks on its calibration, the checks of its
    forecasters, its stored choices, its two models and the backtest path, and (with `data`, read by
    `Predictor.read`) the data checks: fills, the scaler, the scaled inputs, the windows and splits. `report`
    hears each result as soon as it is made (the refits of some checks take minutes where ETS is a candidate)."""
    cfg, calibration = predictor.config.model, predictor.calibration
    results: list[CheckResult] = []

    def add(*made: CheckResult) -> None:
        for result in made:
            results.append(result)
            if report is not None:
                report(result)

    def half_widths(windows):
        return None if calibration is None else calibration.half_widths(windows)

    add(*check_model(predictor.model))
    add(check_intervals(half_widths, cfg.context_len, cfg.horizon, predictor.layout.n_targets))
    for check in (
        check_forecasters,
        check_settings,
        check_epoch,
        check_train_windows,
        check_scales,
        check_choices,
        check_final,
        check_linear,
        check_linear_choice,
        check_backtest_origins,
        check_predict_origins,
    ):
        add(check(predictor, data))
    if data is not None:
        add(*check_data(data, predictor.config))
    else:
        add(CheckResult.skip("data/*", "no data: its fills, scaler, scaled inputs, windows and splits"))
    return results


EPOCH_TOLERANCE = 1e-4  # train/epoch: rounding of the same forecasts (0 on the machine that trained it); another
# epoch's score differs by more (the tests' epoch chosen on test windows: by 1e-2 and more)
PREDICT_TOLERANCE = 1e-5  # predict/origin: the two paths batch and scale alike, up to float32 rounding
PROBE_WINDOWS = 8  # windows each probe forecasts (ETS and Theta fit every one: keep it cheap)


def _probe_windows(windows: WindowIndex) -> WindowIndex:
    """Up to PROBE_WINDOWS of `windows`, evenly spread."""
    return windows.subset(torch.linspace(0, len(windows) - 1, min(PROBE_WINDOWS, len(windows))).long())


def check_settings(predictor: Predictor, data: Prepared | None) -> CheckResult:
    """The rules that choose the automatic settings (`choices.resolve_from_data`: the sizes, the calendar, the
    cycle, the loss, the epochs, the members, the candidates) read no row after the validation split: the
    settings left automatic (the run's config as given; for a run saved before it was kept, every one) chosen
    again on the data and with every later value redrawn, the choices agree."""
    from tsformer.data.choices import automatic, resolve_from_data

    name = "choices/settings"
    if data is None:
        return CheckResult.skip(name, "no data: the settings cannot be chosen again")
    frame, auto = data.frame, predictor.given or automatic(predictor.config)
    try:
        on_data, _ = resolve_from_data(auto, frame)
    except (DataError, ConfigError) as exc:  # a run saved before its given config was kept: some were the user's
        return CheckResult.skip(name, f"every setting made automatic cannot be chosen on these data ({exc})")
    redrawn, _ = resolve_from_data(auto, _frame_redrawn_after(data, data.borders.val_end))
    same = on_data == redrawn
    return CheckResult(
        name,
        same,
        0.0 if same else float("inf"),
        "the automatic settings chosen again with every value after the validation rows redrawn: "
        + ("the same choices" if same else f"DIFFERENT choices ({_config_changes(on_data, redrawn)})"),
    )


def check_epoch(predictor: Predictor, data: Prepared | None) -> CheckResult:
    """The epoch kept was chosen on the validation windows: the held-out model's validation score, made again
    with every row after validation redrawn, is the best score training recorded (an epoch chosen on any
    other windows recorded another)."""
    from tsformer.train import validation_of

    name = "train/epoch"
    summary = predictor.summary
    if data is None:
        return CheckResult.skip(name, "no data: the validation score cannot be made again")
    if summary is None or predictor.given is None:  # a score recorded before checkpoint format 17 may be another
        return CheckResult.skip(name, "a run saved before checkpoint format 17, whose score was defined otherwise")
    windows = _redrawn_after(data, data.borders.val_end).split_windows("val")
    score, _ = validation_of(predictor.model.eval(), windows, predictor.context_len)
    change = abs(score.score - summary.best_val_loss)
    return CheckResult(
        name,
        change <= EPOCH_TOLERANCE * max(1.0, abs(summary.best_val_loss)),
        change,
        f"the held-out model's validation score on the {len(windows)} validation windows, every later row "
        f"redrawn, against the best one training recorded (epoch {summary.best_epoch}: {summary.best_val_loss:.6g})",
    )


def check_train_windows(predictor: Predictor, data: Prepared | None) -> CheckResult:
    """The held-out model trained on the training split's windows: the count training recorded is the count of
    windows whose targets end by each series' training end (a model trained on windows reaching into validation
    or test recorded more)."""
    name = "train/windows"
    if data is None or predictor.summary is None:
        return CheckResult.skip(name, "no data or no training summary: the windows cannot be counted again")
    expected = len(data.split_windows("train", predictor.config.train.train_stride))
    recorded = predictor.summary.n_train_windows
    return CheckResult(
        name,
        recorded == expected,
        float(abs(recorded - expected)),
        f"training windows recorded ({recorded}) against those of the training split ({expected})",
    )


def check_scales(predictor: Predictor, data: Prepared | None) -> CheckResult:
    """The scores' own scales read no later row: each series' MASE denominators (validation windows': its
    training rows; test windows': its rows before the test split) and the seasonal-naive interval widths (its
    training rows) made again with every later value redrawn are the same, so no test row moves a score's
    yardstick."""
    from tsformer.evaluate import seasonal_naive_widths

    name = "evaluate/scales"
    if data is None:
        return CheckResult.skip(name, "no data: the scales cannot be made again")
    season, borders = predictor.season, data.borders
    after_train = dataclasses.replace(data, frame=_frame_redrawn_after(data, borders.train_end))
    after_val = dataclasses.replace(data, frame=_frame_redrawn_after(data, borders.val_end))

    def widths(prepared: Prepared) -> np.ndarray:
        return seasonal_naive_widths(prepared, season, predictor.horizon, predictor.interval_levels)

    pairs = [
        (data.mase_scales(season, "val"), after_train.mase_scales(season, "val")),
        (data.mase_scales(season, "test"), after_val.mase_scales(season, "test")),
        (widths(data), widths(after_train)),
    ]
    change = max(
        float(np.nan_to_num(np.where(np.isnan(a) & np.isnan(b), 0.0, np.abs(a - b)), nan=np.inf).max(initial=0.0))
        for a, b in pairs
    )
    return CheckResult(
        name,
        change == 0.0,
        change,
        "MASE denominators (validation and test) and seasonal-naive interval widths made again with every value "
        "after the rows they may read redrawn",
    )


def _config_changes(one, other) -> str:
    """The settings where two configs differ, as section.key one -> other."""
    changes = []
    for section in ("data", "model", "train"):
        a, b = getattr(one, section), getattr(other, section)
        for field in dataclasses.fields(a):
            if getattr(a, field.name) != getattr(b, field.name):
                changes.append(f"{section}.{field.name} {getattr(a, field.name)} -> {getattr(b, field.name)}")
    return ", ".join(changes)


def check_choices(predictor: Predictor, data: Prepared | None) -> CheckResult:
    """Where the stored choices were made: the fallback and the interval and quantile calibration, recomputed
    from the run's validation windows with its held-out model, every row after them redrawn as noise, must be
    what the checkpoint holds (choices made, or intervals recalibrated, on any other windows or rows differ)."""
    if data is None:
        return CheckResult.skip("choices/validation", "no data: the choices cannot be recomputed")
    redrawn = _redrawn_after(data, data.borders.val_end)
    stored, val_windows = predictor.calibration, redrawn.split_windows("val")
    fresh, _ = choose_and_calibrate(predictor.replace(fallback=None, calibration=None), val_windows, redrawn)
    shape = (len(predictor.series), predictor.layout.n_targets)
    same_fallback = np.array_equal(_weight_table(fresh.fallback, shape), _weight_table(predictor.fallback, shape))
    change, remade = 0.0, True
    if (stored is None) != (fresh.calibration is None):
        change = float("inf")
    elif stored is not None:
        pairs = [(stored.widths, fresh.calibration.widths), (stored.typical, fresh.calibration.typical)]
        old_adjust, new_adjust = stored.quantile_adjust, fresh.calibration.quantile_adjust
        remade = old_adjust is None or stored.quantile_method == fresh.calibration.quantile_method
        if remade:
            pairs.append((old_adjust, new_adjust))
        elif new_adjust is None or new_adjust.shape != old_adjust.shape:  # an earlier format's: only that they exist
            change = float("inf")
        for old, new in pairs:
            if (old is None) != (new is None) or (old is not None and old.shape != new.shape):
                change = float("inf")
            elif old is not None:
                change = max(change, float((old - new).abs().max()) if old.numel() else 0.0)
        if stored.levels != fresh.calibration.levels:
            change = float("inf")
    passed = same_fallback and change <= 1e-6
    return CheckResult(
        "choices/validation",
        passed,
        change,
        f"the fallback ({'as stored' if same_fallback else 'DIFFERENT from the stored one'}) and the calibration "
        f"recomputed from the run's {len(val_windows)} validation windows, every later row redrawn, against the "
        "checkpoint's" + ("" if remade else " (its quantile shifts, calibrated by an earlier format, not remade)"),
    )


def check_linear(predictor: Predictor, data: Prepared | None) -> CheckResult:
    """The linear candidate (`tsformer.model.linear_candidate`) read each series' training rows alone: fitted
    again after every later row is redrawn as noise, it is the one the run holds, and an automatic ridge chosen
    again so is the one chosen on the data, with the same scores on the held training windows."""
    if predictor.linear is None:
        return CheckResult("linear/rows", True, 0.0, "no linear candidate (train.candidates, or a quantile head)")
    if data is None:
        return CheckResult.skip("linear/rows", "no data: the linear candidate cannot be fitted again")
    train = predictor.config.train
    redrawn = _redrawn_after(data, data.borders.train_end)
    windows = redrawn.split_windows("train", train.train_stride)
    fitted = linear_candidate.fit(predictor.model, windows, train.seed, train.linear_rows, train.linear_ridge)
    refitted = linear_candidate.skips(fitted)
    held = linear_candidate.skips(predictor.linear)
    change = max(float((a - b).abs().max()) for a, b in zip(held, refitted, strict=True))
    auto = dataclasses.replace(predictor.config, train=dataclasses.replace(train, linear_ridge=None))
    on_data, again = fit_linear(auto, data, predictor.model), fit_linear(auto, redrawn, predictor.model)
    scores = on_data.ridge_scores
    if set(scores) != set(again.ridge_scores) or on_data.ridge != again.ridge:  # another choice: a leak
        change = max(change, abs(on_data.ridge - again.ridge), 1.0)
    else:
        change = max([change, *(abs(scores[r] - again.ridge_scores[r]) for r in scores)])
    return CheckResult(
        "linear/rows",
        change == 0.0,
        change,
        "the linear candidate fitted again, and its ridge chosen again, with every row after the training rows "
        "redrawn, against the run's",
    )


def check_linear_choice(predictor: Predictor, data: Prepared | None) -> CheckResult:
    """The choice of the linear candidate's rows and ridge (train.linear_rows auto, train.linear_ridge unset:
    `calibration.fit_linear`) read no row after the validation split: made again on the data and with every
    later row redrawn as noise, the two choices and each kind of rows' validation score are the same."""
    name = "linear/choice"
    if predictor.linear is None:
        return CheckResult(name, True, 0.0, "no linear candidate (train.candidates, or a quantile head)")
    if data is None:
        return CheckResult.skip(name, "no data: the linear candidate cannot be fitted again")
    cfg = predictor.config
    auto = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, linear_rows="auto", linear_ridge=None))
    on_data = fit_linear(auto, data, predictor.model)
    redrawn = fit_linear(auto, _redrawn_after(data, data.borders.val_end), predictor.model)
    change = max(abs(on_data.scores[rows] - redrawn.scores[rows]) for rows in on_data.scores)
    same = (on_data.rows, on_data.ridge) == (redrawn.rows, redrawn.ridge)
    return CheckResult(
        name,
        change == 0.0 and same,
        change,
        "the rows and ridge of the linear candidate chosen again with every row after the validation rows redrawn: "
        f"the same choice ({on_data.rows}, ridge {on_data.ridge:g}) and validation scores",
    )


def _redrawn_after(data: Prepared, ends: np.ndarray) -> Prepared:
    """`data` with every target row from each series' `ends` (n_ids,) on redrawn as large noise (seed 0)."""
    later = torch.from_numpy(~_rows_before(data.frame, ends))  # (n_rows,)
    noise = 1e3 * torch.randn(data.inputs.target.shape, generator=torch.Generator().manual_seed(0))
    redrawn = torch.where(later.view(-1, 1), noise.to(data.inputs.target.dtype), data.inputs.target)
    return dataclasses.replace(data, inputs=dataclasses.replace(data.inputs, target=redrawn))


def _frame_redrawn_after(data: Prepared, ends: np.ndarray) -> SeriesFrame:
    """`data`'s frame with every value (targets and covariates) from each series' `ends` (n_ids,) on redrawn as
    large noise in its series' units (`leakage.redrawn_rows`, seed 0), as read: before scaling."""
    return redrawn_rows(data.frame, ~_rows_before(data.frame, ends), data.scaler, np.random.default_rng(0))


def check_backtest_origins(predictor: Predictor, data: Prepared | None) -> CheckResult:
    """The backtest path (`score_origins`: windows, every forecaster, the fallback, the intervals, the table in the
    data's units) forecasts from each series' first test origin exactly as before after every target and
    past-only covariate from that origin on is redrawn (known-future covariates may be read up to the horizon)."""
    origins, probed, skipped = _test_origins(predictor, data, "backtest/origin")
    if skipped is not None:
        return skipped
    rows = origins[probed, None]  # (n_probed, 1)
    base = score_origins(predictor, data, rows, probed).forecasts
    later = torch.from_numpy(~_rows_before(data.frame, origins))  # (n_rows,)
    generator = torch.Generator().manual_seed(0)

    def redrawn(block: torch.Tensor | None) -> torch.Tensor | None:
        if block is None:
            return None
        noise = 1e3 * torch.randn(block.shape, generator=generator, dtype=block.dtype)
        return torch.where(later.view(-1, *[1] * (block.dim() - 1)), noise, block)

    inputs = dataclasses.replace(data.inputs, target=redrawn(data.inputs.target), past=redrawn(data.inputs.past))
    after = score_origins(predictor, dataclasses.replace(data, inputs=inputs), rows, probed).forecasts
    columns = [c for c in base.columns if c != "truth" and pd.api.types.is_float_dtype(base[c])]
    change = float(np.nanmax(np.abs(after[columns].to_numpy() - base[columns].to_numpy()))) if columns else 0.0
    return CheckResult(
        "backtest/origin",
        change == 0.0,
        change,
        f"backtest forecasts ({', '.join(columns[:3])}{', ...' if len(columns) > 3 else ''}) from each series' "
        f"first test origin after redrawing every target and past-only covariate from it on, "
        f"{_probed_series(probed, data.frame.n_ids)}",
    )


def check_predict_origins(predictor: Predictor, data: Prepared | None) -> CheckResult:
    """The predict path (`predict.shipped_after`: the model it picks, its scaler, the fallback, the intervals)
    given each series' history up to its first test origin forecasts as the backtest path does from that
    origin on the whole data, which `backtest/origin` proves blind to every later row."""
    from tsformer.predict import shipped_after

    origins, probed, skipped = _test_origins(predictor, data, "predict/origin")
    if skipped is not None:
        return skipped
    frame, horizon = data.frame, predictor.horizon
    windows = origin_windows(data, origins[probed, None], probed).all().split(predictor.context_len)
    backtest = predictor.forecast(windows, probed)
    history = frame.with_rows(_rows_before(frame, origins), origins).of_series(probed)
    ahead = None
    if frame.future is not None:  # known-future covariates of the forecast's steps (known at the origin)
        steps = frame.bounds[probed, None] + origins[probed, None] + np.arange(horizon)  # (n_probed, horizon)
        ahead = frame.future[steps]
    shipped, _, _ = shipped_after(predictor, history, ahead)
    pairs = [(shipped.units(shipped.point), backtest.units(backtest.point))]
    pairs += [
        (a, b)
        for (_, *one), (_, *two) in zip(shipped.bounds(), backtest.bounds(), strict=True)
        for a, b in zip(one, two, strict=True)
    ]
    change = max(float(np.nanmax(np.abs(np.asarray(a, dtype=np.float64) - b))) for a, b in pairs)
    scale = max(1.0, float(np.nanmax(np.abs(pairs[0][1]))))
    return CheckResult(
        "predict/origin",
        change <= PREDICT_TOLERANCE * scale,
        change,
        f"predict's forecast and bounds from each series' history up to its first test origin against the "
        f"backtest path's from that origin on the whole data (allowed: {PREDICT_TOLERANCE:g} of the largest "
        f"forecast, float32 rounding), {_probed_series(probed, frame.n_ids)}",
    )


def _test_origins(
    predictor: Predictor, data: Prepared | None, name: str
) -> tuple[np.ndarray, np.ndarray, CheckResult | None]:
    """(n_ids,) each series' first test step, the series probed (those with a test window after some history),
    and the skipped result that says why `name` probes none (no data, or no series with a test window) or None."""
    if data is None:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, CheckResult.skip(name, "no data: no origins to probe")
    origins = data.borders.val_end
    probed = np.flatnonzero((origins >= 1) & (origins + predictor.horizon <= data.frame.lengths))
    if not len(probed):
        return origins, probed, CheckResult.skip(name, "no series has a test window: not probed")
    return origins, probed, None


def _probed_series(probed: np.ndarray, n_ids: int) -> str:
    """How many series a check probed, and why not the others."""
    if len(probed) == n_ids:
        return f"{n_ids} series"
    return f"{len(probed)} of {n_ids} series (the others have no test window)"


def _rows_before(frame: SeriesFrame, origins: np.ndarray) -> np.ndarray:
    """(n_rows,) bool: the rows before their series' origin (`origins` (n_ids,), rows within each series)."""
    ids = frame.id_of_rows()
    return np.arange(frame.n_rows) - frame.bounds[ids] < origins[ids]


def _weight_table(fallback: Weights | None, shape: tuple[int, int]) -> np.ndarray:
    """(n_series, C, len(BASE)) a fallback's weights over every base forecaster, None (the model everywhere)
    written out, so that two fallbacks compare whichever forecasters each named."""
    table = np.zeros((*shape, len(BASE)))
    if fallback is None:
        table[..., 0] = 1.0
        return table
    for k, name in enumerate(fallback.names):
        table[..., BASE.index(name)] = fallback.values[..., k]
    return table


def check_forecasters(predictor: Predictor, data: Prepared | None) -> CheckResult:
    """Every forecaster the fallback may ship (the model and each classical candidate) forecasts validation
    windows through the path that scores and ships them (`Predictor.forecasters`) exactly as before after every
    target after the origin is redrawn with large random values: none reads a row after its origin."""
    if data is None:
        return CheckResult.skip("forecasters/future", "no data: no windows to probe")
    windows = data.split_windows("val")
    if not len(windows):
        return CheckResult.skip("forecasters/future", "no validation window to probe")
    probed = _probe_windows(windows)
    picked = probed.all()
    context_len = predictor.context_len
    generator = torch.Generator().manual_seed(0)
    redrawn = picked.target.clone()
    redrawn[:, context_len:] = 1e3 * torch.randn(redrawn[:, context_len:].shape, generator=generator)
    floor = predictor.floors(probed.series())
    before, _ = predictor.forecasters(picked.split(context_len), floor, reference=True)
    after, _ = predictor.forecasters(
        dataclasses.replace(picked, target=redrawn).split(context_len), floor, reference=True
    )
    change = {name: float((after[name] - before[name]).abs().max()) for name in before}
    worst = max(change.values())
    moved = [name for name, value in change.items() if value > 0]
    return CheckResult(
        "forecasters/future",
        worst == 0.0,
        worst,
        f"forecasts of {len(picked)} validation windows by the model and {len(before) - 1} candidates after "
        f"redrawing every target after the origin{': ' + ', '.join(moved) + ' moved' if moved else ''}",
    )


def check_final(predictor: Predictor, data: Prepared | None) -> CheckResult:
    """Which model read which rows: the held-out model scores (evaluate and backtest forecast test windows with
    it, never with the final model, which trained on them), and the final model read exactly the rows of each
    series up to its end (so predict's origins lie after them). Without `data` only the first can be said."""
    final = predictor.final
    if final is None:
        return CheckResult("final/rows", True, 0.0, "no final model: every command uses the held-out model")
    if data is None:
        return CheckResult.skip("final/rows", "no data: which rows the final model read is unproven")
    windows = data.split_windows("test")
    if not len(windows):
        return CheckResult("final/rows", False, float("inf"), "no test window to probe the scoring path on")
    picked = _probe_windows(windows)
    cut, ids = picked.split(predictor.context_len), picked.series()
    scored = predictor.forecast(cut, ids).each["model"]  # what evaluate and backtest score, at the data's floor
    floor = predictor.floors(ids)  # (N, 1, C): a count's zero, say (-inf where none)

    def own(model) -> torch.Tensor:
        return torch.cat(list(model.predict_batches(cut.context, cut.context_observed, cut.covariates))).cpu()

    held_out = own(predictor.model)
    change = float((scored - torch.maximum(held_out, floor)).abs().max())  # both at the floor
    distinct = bool((own(final.model) - held_out).abs().max() > 0)  # raw: below the floor both would read 0
    until_ok = bool(np.array_equal(final.until, last_timestamps(data.frame.through_last_value(data.config.data.fill))))
    predicts_final = predictor.for_origins(data.frame)[0].model is final.model
    passed = change == 0.0 and distinct and until_ok and predicts_final
    return CheckResult(
        "final/rows",
        passed,
        change,
        f"test windows scored by the held-out model ({len(ids)} probed; the final model forecasts them "
        f"{'differently' if distinct else 'IDENTICALLY'}); the final model read each series to its "
        f"{'last row' if until_ok else 'rows NOT matching this data'}; predict "
        f"{'uses it' if predicts_final else 'does NOT use it'}",
    )
