"""`evaluate(run)`: honest metrics on every test window, beside naive baselines."""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from tsformer.checkpoint import Checkpoint, load_checkpoint, resolve_checkpoint
from tsformer.config import with_data_path
from tsformer.data import Prepared, SeriesFrame, prepare
from tsformer.data.prepare import scale_season
from tsformer.errors import DataError
from tsformer.fallback import all_forecasts, apply, season_for, shipped_quantiles
from tsformer.files import atomic_write_text
from tsformer.intervals import (
    adjust_quantiles,
    coverage,
    interval_quantiles,
    label,
    msis,
    quantile_loss,
    quantile_pairs,
)
from tsformer.leakage import check_scaler
from tsformer.metrics import mase_scale, score, score_by_series

CALIBRATED_BY = {"validation": "", "refit": " by a model trained one validation + test stretch earlier"}


@dataclass(frozen=True)
class EvalReport:
    split: str  # "test" (or "val")
    n_windows: int
    context_len: int
    horizon: int
    season: int
    columns: tuple[str, ...]
    scores: dict[str, dict]  # "model" (with its fallback), "repeat_last", "seasonal_naive" -> score()
    fallback: tuple[tuple[str, ...], ...] = ()  # per series and column, the forecaster chosen on validation
    intervals: dict[str, dict] = dataclasses.field(default_factory=dict)  # level label -> coverage, width, MSIS
    quantile_loss: dict = dataclasses.field(default_factory=dict)  # the intervals' implied quantiles -> WQL
    n_series: int = 1  # series scored (long format); 1 for a wide file
    worst_series: list[dict] = dataclasses.field(default_factory=list)  # long format: the ten with the highest MASE

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def load_run_data(ckpt: Checkpoint, csv: str | Path | None = None) -> Prepared:
    """The run's CSV (or `csv`), read with the run's columns, series, frequency, scaler and split borders.

    It must hold the run's series, reach the end of each one's test split and hold the training rows
    the scaler was fit on.
    """
    cfg = ckpt.config
    if csv is not None:
        cfg = with_data_path(cfg, csv)
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, id_cols=ckpt.id_cols))
    data = prepare(cfg, scaler=ckpt.scaler, columns=ckpt.columns, freq=ckpt.freq, series=ckpt.series)
    short = np.flatnonzero(data.frame.lengths < ckpt.borders.test_end)
    if len(short):
        i = int(short[0])
        where = f"series {data.frame.names[i]!r} of " if ckpt.id_cols else ""
        raise DataError(
            f"{where}{cfg.data.path} has {data.frame.lengths[i]} rows but the run's test split ends at row "
            f"{ckpt.borders.test_end[i]}; use the CSV the model was trained on"
        )
    data = dataclasses.replace(data, borders=ckpt.borders)
    if not check_scaler(data.frame, data.borders, data.scaler, scale_season(cfg, ckpt.freq)).passed:
        raise DataError(
            f"the training rows of {cfg.data.path} differ from those the run was trained on; "
            "use the CSV the model was trained on"
        )
    return data


def evaluate(run: str | Path, csv: str | Path | None = None, write: bool = True, split: str = "test") -> EvalReport:
    """Score the run's best model on every stride-1 test window; write metrics.json and a PNG (and, for
    many series, metrics_by_series.csv). `split="val"` scores the validation windows instead (to compare
    runs on validation) and writes nothing."""
    path = resolve_checkpoint(run)
    ckpt = load_checkpoint(path)
    data = load_run_data(ckpt, csv)
    model = ckpt.build_model()
    context_len, horizon = ckpt.config.model.context_len, ckpt.config.model.horizon
    windows = data.split_windows(split)
    cut = windows.split(context_len)  # masks None: all observed
    contexts, truth, truth_observed = cut.context, cut.target, cut.target_observed
    season = season_for(ckpt.freq, context_len)
    forecasts = all_forecasts(model, cut, season)  # (N, H, C) each
    frame = data.frame
    ids = windows.series(frame.bounds)  # (N,) each window's series
    model_only = forecasts["model"]
    forecasts["model"] = apply(ckpt.fallback, forecasts, ids)  # what predict gives: the validation choice
    stats = window_stats(data, ids, season)
    truth_mask = None if truth_observed is None else truth_observed.numpy()
    scores = {
        name: score(f.numpy(), truth.numpy(), *stats[:2], frame.columns, stats[2], truth_mask)
        for name, f in forecasts.items()
    }
    naive_widths = seasonal_naive_widths(data, season, horizon, ckpt.interval_levels)[:, ids]  # (levels, N, H, C)
    widths = ckpt.interval_half_widths(cut)  # (levels, N or 1, H, C) or None
    intervals = _interval_scores(ckpt, widths, forecasts, truth, truth_observed, stats, naive_widths)
    wql = _quantile_scores(ckpt, widths, model, cut, {**forecasts, "model": model_only}, stats, ids)
    by_series = None
    if ckpt.id_cols:
        by_series = _series_table(forecasts, truth.numpy(), stats, truth_mask, ids, frame)
    report = EvalReport(
        split,
        len(windows),
        context_len,
        horizon,
        season,
        frame.columns,
        scores,
        ckpt.fallback,
        intervals,
        quantile_loss=wql,
        n_series=len(np.unique(ids)),
        worst_series=_worst(by_series, ckpt.id_cols) if by_series is not None else [],
    )
    if write and split == "test":
        run_dir = path.parent
        atomic_write_text(run_dir / "metrics.json", json.dumps(report.to_dict(), indent=2))
        if by_series is not None:
            atomic_write_text(run_dir / "metrics_by_series.csv", by_series.to_csv(index=False))
        _plot_windows(contexts, truth, forecasts["model"], data, ids, by_series, run_dir / "test_windows.png")
    return report


def window_stats(data: Prepared, ids: np.ndarray, season: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per window (of series `ids` (N,)), its series' target mean, std and MASE scale (the seasonal-naive MAE
    on its training rows, in the CSV's units): (N, C) each."""
    frame = data.frame
    scales = np.stack(
        [mase_scale(frame.values[frame.rows_of(i)][: data.borders.train_end[i]], season) for i in range(frame.n_ids)]
    )  # (n_ids, C)
    n_targets = len(frame.columns)  # the scaler also holds the covariates' statistics
    return data.scaler.mean[ids, :n_targets], data.scaler.std[ids, :n_targets], scales[ids]


def _series_table(
    forecasts: dict[str, torch.Tensor],
    truth: np.ndarray,
    stats: tuple[np.ndarray, np.ndarray, np.ndarray],
    observed: np.ndarray | None,
    ids: np.ndarray,
    frame: SeriesFrame,
) -> pd.DataFrame:
    """One row per series and column: the id columns, the column, the model's metrics, and the MASE of the
    naive forecasters beside it."""
    tables = {
        name: score_by_series(f.numpy(), truth, *stats, observed, ids, frame.n_ids) for name, f in forecasts.items()
    }
    rows = []
    for i, key in enumerate(frame.keys):
        for j, column in enumerate(frame.columns):
            model = tables["model"][i][j]
            if model is None:  # no test window, or no observed test point, in this series
                continue
            row = dict(zip(frame.id_cols, key, strict=True)) | {"column": column} | model
            row |= {f"{name}_mase": tables[name][i][j]["mase"] for name in forecasts if name != "model"}
            rows.append(row)
    return pd.DataFrame(rows)


def _worst(by_series: pd.DataFrame, id_cols: tuple[str, ...], n: int = 10) -> list[dict]:
    """The `n` series (and columns) with the highest model MASE: their name, column and metrics."""
    worst = by_series.nlargest(n, "mase")
    names = worst[list(id_cols)].astype(str).agg("/".join, axis=1)
    return worst.drop(columns=list(id_cols)).assign(series=names.to_numpy()).to_dict(orient="records")


def seasonal_naive_widths(data: Prepared, season: int, horizon: int, levels: tuple[float, ...]) -> np.ndarray:
    """Seasonal-naive intervals from its in-sample errors: per series, level, step h and column, the level-
    quantile of |y_t - y_(t - lag)| over the series' training rows, lag = season x ceil(h / season) (the
    lag its h-step forecast repeats); scaled like the data. (n_levels, n_ids, H, C)."""
    frame = data.frame
    n_targets = len(frame.columns)
    lags = season * np.ceil(np.arange(1, horizon + 1) / season).astype(int)  # (H,)
    out = np.zeros((len(levels), frame.n_ids, horizon, n_targets))
    values = np.where(frame.observed, frame.values, np.nan)
    for i in range(frame.n_ids):
        train = values[frame.rows_of(i)][: data.borders.train_end[i]]
        for lag in np.unique(lags):
            steps = lags == lag
            if lag >= len(train):
                out[:, i, steps] = np.nan
                continue
            errors = np.abs(train[lag:] - train[:-lag])  # (rows, C)
            with warnings.catch_warnings():  # a column with no pair: NaN, filled below
                warnings.simplefilter("ignore", RuntimeWarning)
                out[:, i, steps] = np.nanquantile(errors, levels, axis=0)[:, None, :]
        out[:, i] /= data.scaler.std[i, :n_targets]
    widest = np.nanmax(np.where(np.isnan(out), -np.inf, out), axis=(1, 2), keepdims=True)
    return np.where(np.isnan(out), np.maximum(widest, 0), out)


def _interval_scores(
    ckpt: Checkpoint,
    widths: np.ndarray | None,
    forecasts: dict[str, torch.Tensor],
    truth: torch.Tensor,
    observed: torch.Tensor | None,
    stats: tuple[np.ndarray, np.ndarray, np.ndarray],
    naive_widths: np.ndarray,
) -> dict[str, dict]:
    """Per calibrated level: the share of observed test truth inside the interval (nominal: the level), its
    mean width in the CSV's units, and its MSIS (M4's interval score over the MASE scale); per column and
    averaged; and the same for seasonal naive with its in-sample intervals (`naive_widths` (levels, N, H, C)).
    widths: the model's half-widths (levels, N or 1, H, C); stats: each window's (mean, std, MASE scale),
    (N, C) each."""
    out: dict[str, dict] = {}
    if widths is None:
        return out
    n_targets = len(ckpt.columns)
    mean, std, scale = (x[:, :n_targets] for x in stats)
    y = truth.numpy()
    mask = None if observed is None else observed.numpy()

    def scores(forecast: np.ndarray, width: np.ndarray, level: float) -> dict:
        """width: (1, H, C) or (N, H, C), scaled."""
        share, _ = coverage(torch.from_numpy(forecast), truth, observed, torch.from_numpy(width))
        width_units = 2 * (np.broadcast_to(width, forecast.shape) * std[:, None]).mean(axis=(0, 1))  # (C,)
        per_width = np.broadcast_to(width, forecast.shape)
        interval_scores = [
            msis(forecast[..., j : j + 1], y[..., j : j + 1], None if mask is None else mask[..., j : j + 1],
                 per_width[..., j : j + 1], std[:, j : j + 1], scale[:, j : j + 1], level)
            for j in range(n_targets)
        ]  # fmt: skip
        return {
            "coverage": float(np.mean(share)),
            "width": float(np.mean(width_units)),
            "msis": float(np.mean(interval_scores)),
            "per_column": {
                name: {"coverage": float(share[j]), "width": float(width_units[j]), "msis": interval_scores[j]}
                for j, name in enumerate(ckpt.columns)
            },
        }

    model, naive = forecasts["model"].numpy(), forecasts["seasonal_naive"].numpy()
    for k, (level, width) in enumerate(zip(ckpt.interval_levels, widths, strict=True)):
        out[label(level)] = {
            "nominal": level,
            "calibration": ckpt.config.train.interval_calibration,
            **scores(model, width, level),
            "seasonal_naive": scores(naive, naive_widths[k].astype(np.float32), level),
        }
    return out


def _quantile_scores(
    ckpt: Checkpoint,
    widths: np.ndarray | None,
    model,
    cut,
    forecasts: dict[str, torch.Tensor],
    stats: tuple[np.ndarray, np.ndarray, np.ndarray],
    ids: np.ndarray,
) -> dict:
    """The weighted quantile loss of the model's quantiles (conformally adjusted, with --quantiles) and the
    coverage of each (q, 1 - q) pair; without quantiles, of those the intervals imply (the point forecast
    as the median; `widths` (levels, N or 1, H, C))."""
    n_targets = len(ckpt.columns)
    mean, std = stats[0][:, :n_targets], stats[1][:, :n_targets]
    truth = cut.target.numpy()
    mask = None if cut.target_observed is None else cut.target_observed.numpy()
    quantiles = shipped_quantiles(model, cut, forecasts, ckpt.fallback, ids)  # forecasts: the model's own
    if quantiles is None:
        if widths is None:
            return {}
        shipped = apply(ckpt.fallback, forecasts, ids).numpy()
        implied = interval_quantiles(shipped, widths, ckpt.interval_levels)
        return {
            "source": "intervals",
            "quantiles": [q for q, _ in implied],
            "wql": quantile_loss(implied, truth, mask, mean, std),
        }
    levels = sorted(ckpt.config.train.quantiles)
    pairs = quantile_pairs(ckpt.config.train.quantiles)
    adjusted = adjust_quantiles(quantiles, ckpt.quantile_adjust, pairs).numpy()  # (N, H, C, Q)
    inside = {}
    for lo, hi in pairs:
        hit = (adjusted[..., lo] <= truth) & (truth <= adjusted[..., hi])
        keep = np.ones(hit.shape, dtype=bool) if mask is None else mask
        inside[f"{levels[lo]:g}-{levels[hi]:g}"] = float(hit[keep].mean())
    pairs_of_values = [(q, adjusted[..., k]) for k, q in enumerate(levels)]
    return {
        "source": "model",
        "quantiles": levels,
        "wql": quantile_loss(pairs_of_values, truth, mask, mean, std),
        "coverage": inside,
    }


def _plot_windows(contexts, truth, forecast, data: Prepared, ids: np.ndarray, by_series, path: Path) -> None:
    """Three test windows of the last column: for one series, the first, middle and last; for many, the
    windows of the series with the lowest, the median and the highest model MASE."""
    from tsformer.plots import plot_windows

    j = len(data.frame.columns) - 1  # the last column (often the target of interest, e.g. OT)
    column = data.frame.columns[j]
    if by_series is None or by_series.empty:
        picks = np.linspace(0, len(contexts) - 1, 3).round().astype(int).tolist()
        starts, _ = data.target_starts("test")
        titles = [f"{column}, test window starting at row {int(starts[i])}" for i in picks]
    else:
        ranked = by_series[by_series["column"] == column].sort_values("mase")
        chosen = ranked.iloc[[0, len(ranked) // 2, len(ranked) - 1]]
        names = ["/".join(str(v) for v in row) for row in chosen[list(data.frame.id_cols)].itertuples(index=False)]
        series = [data.frame.names.index(name) for name in names]
        picks = [int(np.flatnonzero(ids == i)[-1]) for i in series]
        titles = [
            f"{column} of series {name!r} ({rank} MASE, {m:.3g})"
            for name, rank, m in zip(names, ("lowest", "median", "highest"), chosen["mase"], strict=True)
        ]
    std, mean = data.scaler.std[ids[picks], j], data.scaler.mean[ids[picks], j]  # (3,)

    def original(x: torch.Tensor) -> np.ndarray:
        return x[picks, :, j].numpy() * std[:, None] + mean[:, None]

    plot_windows(original(contexts), original(truth), original(forecast), titles, path)


def format_report(report: EvalReport) -> str:
    """A table: one row per forecaster, averaged over columns, then the model per column (and, for many
    series, the ten worst series)."""
    name = "test" if report.split == "test" else "validation"
    windows = (
        f"{name} windows: {report.n_windows} of {report.n_series} series"
        if report.worst_series or report.n_series > 1
        else f"{name} windows: {report.n_windows} (every window, stride 1)"
    )
    lines = [
        f"{windows}   context_len {report.context_len}   horizon {report.horizon}   season {report.season}",
        "",
        f"{'forecaster':<16}{'MSE':>9}{'MAE':>9}{'MAE orig':>12}{'RMSE orig':>12}{'sMAPE':>8}{'MASE':>8}"
        "   (MSE/MAE on scaled values)",
    ]
    for name, s in report.scores.items():
        lines.append(f"{name:<16}{_metrics_row(s['mean'])}")
    fallen_back = []
    for j, column in enumerate(report.columns):
        names = [row[j] for row in report.fallback]  # no fallback recorded: ()
        naive = sum(name != "model" for name in names)
        if naive and len(names) == 1:
            fallen_back.append(f"{column} uses {names[0]}")
        elif naive:
            fallen_back.append(f"{column} uses a naive forecaster in {naive} of {len(names)} series")
    if fallen_back:
        lines.append(f"model row with the fallback chosen on validation: {', '.join(fallen_back)}")
    points = "test points" if report.split == "test" else "validation points (those it was calibrated on)"
    scores = report.quantile_loss
    if scores:
        quantiles = ", ".join(f"{q:g}" for q in scores["quantiles"])
        source = (
            "the model's, conformally adjusted on validation"
            if scores["source"] == "model"
            else "the point forecast as the median, the interval bounds as the others"
        )
        lines.append(f"weighted quantile loss {scores['wql']:.4f} over the quantiles {quantiles} ({source})")
        for pair, share in scores.get("coverage", {}).items():
            lines.append(f"quantiles {pair}: cover {100 * share:.1f} % of {points}")
    for tag, interval in report.intervals.items():
        lines.append(
            f"{tag} % interval (conformal, calibrated on validation{CALIBRATED_BY[interval['calibration']]}): "
            f"coverage {100 * interval['coverage']:.1f} % "
            f"of {points}, mean width {interval['width']:.4g} (original units, averaged over columns), "
            f"MSIS {interval['msis']:.3f}"
        )
        naive = interval.get("seasonal_naive")
        if naive:
            lines.append(
                f"   seasonal naive's {tag} % interval (from its in-sample errors): coverage "
                f"{100 * naive['coverage']:.1f} %, mean width {naive['width']:.4g}, MSIS {naive['msis']:.3f}"
            )
    lines += ["", "model per column:"]
    for column, m in report.scores["model"]["per_column"].items():
        lines.append(f"  {column[:14]:<14}{_metrics_row(m)}")
    if report.worst_series:
        lines += ["", "ten worst series by model MASE (all in metrics_by_series.csv):"]
        for row in report.worst_series:
            name = f"{row['series']} {row['column']}" if len(report.columns) > 1 else row["series"]
            lines.append(f"  {name[:14]:<14}{_metrics_row(row)}   seasonal naive MASE {row['seasonal_naive_mase']:.3f}")
    return "\n".join(lines)


def _metrics_row(m: dict) -> str:
    return (
        f"{m['mse']:>9.4f}{m['mae']:>9.4f}{m['mae_original']:>12.4g}{m['rmse_original']:>12.4g}"
        f"{m['smape']:>8.3f}{m['mase']:>8.3f}"
    )
