"""Saved runs and files: what the commands do, as one call each (load a run, compute, write its files).

Every function reads a run folder (or trains folds into one), calls the library on a `Predictor`, and
writes its outputs atomically, refusing unusable output paths before any work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from pandas.tseries.frequencies import to_offset

from tsformer.backtest import (
    BacktestResult,
    backtest,
    check_origins,
    origin_rows,
    score_origins,
    series_with_origins,
    write_backtest,
)
from tsformer.check import check_predictor
from tsformer.config import DEFAULT_SPLIT_RATIOS, Config
from tsformer.data import Prepared, Source, training_data
from tsformer.data.split import val_horizons
from tsformer.distributed import is_main_process
from tsformer.errors import ConfigError, DataError
from tsformer.evaluate import EvalReport, evaluate, write_report
from tsformer.files import check_output_path
from tsformer.leakage import CheckResult
from tsformer.predict import Forecast, forecast_after, write_forecast
from tsformer.predictor import Predictor, load_finished
from tsformer.runfolder import resolve_checkpoint
from tsformer.train import resolve, train

REFIT_WINDOWS = 5  # origins a refit backtest trains at when not told


def evaluate_run(run: str | Path, csv: str | Path | None = None, split: str = "test", write: bool = True) -> EvalReport:
    """Score a saved run on its CSV (or `csv`); for the test split write metrics.json and a PNG (and, for many
    series, metrics_by_series.csv) into the run folder. `split="val"` writes nothing."""
    path = resolve_checkpoint(run)
    predictor = _load(path)
    data = predictor.read(csv)
    report = evaluate(predictor, data, split)
    if write and split == "test":
        write_report(report, data, path.parent)
    return report


def predict_run(
    run: str | Path,
    csv: str | Path,
    out: Path | None = None,
    plot: Path | None = None,
    future: str | Path | None = None,
    static: str | Path | None = None,
) -> Forecast:
    """The forecast after a CSV's last rows with a saved run; with `out` and/or `plot`, the CSV and the PNG are
    written atomically, and only when both succeed."""
    _check_outputs(out, plot, (csv, future, static))
    predictor = _load(run)
    frame = predictor.read_frame(csv, static)
    forecast = forecast_after(predictor, frame, future)
    write_forecast(forecast, predictor, forecast.history, out, plot)
    return forecast


def backtest_run(
    run: str | Path,
    csv: str | Path | None = None,
    windows: int | None = None,
    step: int = 0,
    start: str | None = None,
    out: Path | None = None,
    plot: Path | None = None,
) -> BacktestResult:
    """`backtest` of a saved run on its CSV (or `csv`); with `out`/`plot`, write the long CSV and a plot of
    error by origin."""
    predictor = _load(run)
    _check_outputs(out, plot, (csv,) if csv is not None else _data_files(predictor.config))
    result = backtest(predictor, predictor.read(csv), windows, step, start)
    write_backtest(result, out, plot)
    return result


def refit_backtest(
    cfg: Config,
    out_dir: Path | None = None,
    windows: int | None = None,
    step: int = 0,
    start: str | None = None,
    out: Path | None = None,
    plot: Path | None = None,
    show_progress: bool = False,
    source: Source | None = None,
    static: Source | None = None,
    note: str = "",
    report: Callable[[str], None] | None = None,
) -> BacktestResult:
    """Train a model per origin on the steps before it only (an expanding window: the last stretch of them
    validates, as long as the split rule gives those rows, `fold_val_len`; its scaler comes from the rest),
    forecast from the origin, and score. No setting of a fold reads a row after its origin. Each fold's run
    goes into `out_dir`/fold_N, or stays in memory when `out_dir` is None. `note`: where `cfg` fixes settings
    chosen on later rows (`Predictor.refit_config`), said first. `report` hears a line as each fold starts to
    train (a fold may take minutes).

    A panel's folds cut every series at the same dates when its origins fall on the same timestamps (the
    series end together, or --start names the date), so no series trains on a time after another's
    origin; otherwise, and in a wide file, at the same rows when the series have equal lengths. `windows`
    None: REFIT_WINDOWS."""
    _check_outputs(out, plot, (source, static) if source is not None else _data_files(cfg))
    windows = REFIT_WINDOWS if windows is None else windows
    check_origins(windows, step)
    cfg = resolve(cfg)
    data = training_data(cfg, source, static)  # the whole file, for the origins and each fold's size
    frame, horizon = data.frame, data.config.model.horizon
    series = series_with_origins(frame, horizon, windows, step or horizon, start)  # the others: left out
    rows = origin_rows(frame, horizon, windows, step or horizon, start, series)  # (n_series, windows)
    first_steps = frame.timestamps[(frame.bounds[series, None] + rows).reshape(-1)]  # the first series' first
    by_dates = bool(frame.id_cols) and bool(
        (first_steps.asi8.reshape(rows.shape) == first_steps.asi8[: rows.shape[1]]).all()
    )
    by_rows = not by_dates and bool((rows == rows[:1]).all())
    if not (by_rows or by_dates):
        raise DataError(
            "--refit needs the origins at the same rows or the same timestamps in every series, and these series "
            "end at different times; name the first forecast step with --start DATE, or backtest a trained run "
            "without --refit"
        )
    offset = to_offset(frame.freq)
    results, notes = [], [note] if note else []
    if len(series) < frame.n_ids:  # they still train in every fold: only their rows cannot hold the origins
        left = [frame.names[i] for i in np.setdiff1d(np.arange(frame.n_ids), series)]
        notes.append(
            f"{len(left)} series left out of the scores, too short for the origins ({', '.join(map(repr, left[:3]))}"
            f"{', ...' if len(left) > 3 else ''}); each fold still trains on their rows before its origin"
        )
    for fold in range(rows.shape[1]):
        val_len = fold_val_len(cfg, data, rows[:, fold])  # from the rows before this fold's origin alone
        if not by_dates:
            origin = int(rows[0, fold])
            borders: tuple[int | str, ...] = (origin - val_len, origin, origin + horizon)
            note = f"trained on rows 0..{origin - val_len - 1}, validated on {origin - val_len}..{origin - 1}"
        else:  # every series cut at the same dates
            when = first_steps[fold]
            borders = tuple(str(t) for t in (when - val_len * offset, when, when + horizon * offset))
            note = f"trained on the steps before {borders[0]}, validated on those before {borders[1]}"
        # from the given config: every automatic setting is chosen again from the rows before this fold's origin
        fold_cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, split_borders=borders))
        run = None if out_dir is None else out_dir / f"fold_{fold + 1}"
        if report is not None and is_main_process():
            report(f"fold {fold + 1} of {rows.shape[1]}: training on the rows before {first_steps[fold]}")
        predictor = train(fold_cfg, run, overwrite=True, show_progress=show_progress, source=source, static=static)
        if not (predictor.borders.val_end[series] == rows[:, fold]).all():  # its training and validation end there
            raise RuntimeError(f"fold {fold + 1}'s split borders {list(borders)} do not end at its origins")
        results.append(score_origins(predictor, predictor.read(), rows[:, fold : fold + 1], series))
        notes += [f"fold {fold + 1}: {line}" for line in (note, *results[-1].notes)]  # its rows, what it ships
    forecasts = pd.concat([r.forecasts for r in results], ignore_index=True)
    per_origin = pd.concat([r.summary[r.summary.origin != "all"] for r in results], ignore_index=True)
    # overall: the forecasters every fold has (a fold whose context is under a week has no weekly candidates)
    shared = set.intersection(*(set(r.summary.forecaster) for r in results))
    overall = (
        per_origin[per_origin.forecaster.isin(shared)].groupby("forecaster", sort=False).mean(numeric_only=True)
    ).reset_index()
    summary = pd.concat([per_origin, overall.assign(origin="all")], ignore_index=True)
    result = BacktestResult(forecasts, summary, results[0].time_col, results[0].time_notation, tuple(notes))
    if is_main_process():  # under torchrun every rank trained the folds; rank 0 writes what they give
        write_backtest(result, out, plot)
    return result


def fold_val_len(cfg: Config, data: Prepared, before: np.ndarray) -> int:
    """The validation steps of a `backtest --refit` fold whose series have `before` (n_ids,) rows before its
    origin, from those rows alone (so rows after the origin never move a fold): the long format's default
    `data.val_horizons` horizons for those lengths; the validation share of train + validation of the rows
    before it otherwise (data.split_ratios or the default); the run's own validation stretch under
    data.split_borders."""
    horizon, data_cfg = cfg.model.horizon, cfg.data
    if data_cfg.split_borders:  # the run's validation stretch: of a series with rows before and in it (one that
        # starts inside it, or ends before it, holds less of it)
        borders = data.borders
        return int((borders.val_end - borders.train_end)[borders.train_end > 0].max())
    if data.frame.is_panel and not data_cfg.split_ratios:
        return val_horizons(data_cfg, before, horizon) * horizon
    train_share, val_share, _ = data_cfg.split_ratios or DEFAULT_SPLIT_RATIOS
    return max(horizon, round(int(before.min()) * val_share / (train_share + val_share)))


def check_run(
    run: str | Path, csv: str | Path | None = None, report: Callable[[CheckResult], None] | None = None
) -> tuple[list[CheckResult], str]:
    """Every check on a saved run; the data checks on the run's CSV (or `csv`) when it can be read; `report`
    hears each result as it is made.

    Returns the results and a note on what was skipped ("" when nothing was).
    """
    predictor = _load(run)
    path = Path(csv) if csv is not None else Path(predictor.config.data.path) if predictor.config.data.path else None
    if path is None or not path.is_file():
        where = f"{path} not found" if path is not None else "the run was trained on a DataFrame"
        return check_predictor(predictor, None, report), f"data checks skipped: {where} (pass --csv to run them)"
    return check_predictor(predictor, predictor.read(path), report), ""


def _load(run: str | Path) -> Predictor:
    """The finished run's Predictor (`load_finished`), on as many torch threads as the run trained with
    (train.num_threads; 0: torch's default), so a run trained to share the cores keeps sharing them."""
    predictor = load_finished(run)
    if predictor.config.train.num_threads:
        torch.set_num_threads(predictor.config.train.num_threads)
    return predictor


def _data_files(cfg: Config) -> tuple[str, ...]:
    """The files a run's config reads: its CSV and its static table, where it names them."""
    return tuple(path for path in (cfg.data.path, cfg.data.static_path) if path)


def _check_outputs(out: Path | None, plot: Path | None, reads: tuple[Source | None, ...] = ()) -> None:
    """Refuse, before any work, an output path that cannot be written or that is one of the files the command
    `reads` (a forecast written over its own history would replace the user's data)."""
    inputs = {Path(read).resolve() for read in reads if isinstance(read, str | Path)}
    for path, flag in ((out, "--out"), (plot, "--plot")):
        if path is not None:
            check_output_path(path, flag)
            if Path(path).resolve() in inputs:
                raise ConfigError(f"{flag} {path} is a file this command reads; write to another path")
    if plot is not None and Path(plot).suffix.lower() != ".png":
        raise ConfigError(f"--plot {plot} would hold a PNG under another name; give a path ending in .png")
