"""`evaluate(predictor, data)`: honest metrics on every test window, beside naive baselines.

It takes a `Predictor` (whose `forecast` ships what is scored) and the data it reads (`Predictor.read`).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pandas as pd
import torch

from tsformer.config import check_split
from tsformer.data import Prepared, SeriesFrame
from tsformer.data.timestamps import as_text
from tsformer.files import atomic_write_text
from tsformer.intermittent import near_zero
from tsformer.intervals import (
    coverage,
    interval_bounds,
    interval_quantiles,
    label,
    msis,
    quantile_loss,
    quantile_pairs,
)
from tsformer.metrics import mean_defined, score, score_by_series
from tsformer.results import Forecasts

ZERO_SHARE_NOTED = 0.1  # evaluate notes sMAPE's two values where at least this share of the scored points is zero

if TYPE_CHECKING:
    from tsformer.predictor import Predictor


class ScoredWindows(NamedTuple):
    """What a report's plot shows: the windows' contexts, truth and shipped forecast, scaled, and their series."""

    context: torch.Tensor  # (N, L, C)
    truth: torch.Tensor  # (N, H, C)
    forecast: torch.Tensor  # (N, H, C)
    ids: np.ndarray  # (N,)


@dataclass(frozen=True)
class EvalReport:
    split: str  # "test" (or "val")
    n_windows: int
    context_len: int
    horizon: int
    season: int
    columns: tuple[str, ...]
    # "model" (with its fallback: what predict ships), "model_alone" (the model everywhere; only when the fallback
    # chose a naive forecaster somewhere), then each candidate ("repeat_last", "seasonal_naive", ...) -> score()
    scores: dict[str, dict]
    fallback: tuple[tuple[str, ...], ...] = ()  # per series and column, what ships: a forecaster, or weights of them
    intervals: dict[str, dict] = dataclasses.field(default_factory=dict)  # level label -> coverage, width, MSIS
    quantile_loss: dict = dataclasses.field(default_factory=dict)  # the intervals' implied quantiles -> WQL
    n_series: int = 1  # series scored (long format); 1 for a wide file
    worst_series: list[dict] = dataclasses.field(default_factory=list)  # long format: the ten with the highest MASE
    intervals_note: str = ""  # the interval levels left out for want of calibration windows ("" when none)
    mase_note: str = ""  # the series left out of MASE and MSIS for want of a scale ("" when none)
    smape_note: str = ""  # how many scored points are zero, where sMAPE is 0 % or 200 % ("" when few are)
    after_note: str = ""  # the rows after the test split, which no split scores ("" when none)
    unscored_note: str = ""  # the series with no window in the split ("" when none)
    by_series: pd.DataFrame | None = dataclasses.field(default=None, repr=False)  # long format: every series
    windows: ScoredWindows | None = dataclasses.field(default=None, repr=False)  # for the plot

    def to_dict(self) -> dict:
        skip = ("by_series", "windows")
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in skip}

    def table(self) -> pd.DataFrame:
        """One row per forecaster (`model` is what predict ships; `model_alone`, when the fallback chose a naive
        forecaster somewhere, the model everywhere): its mean metrics over columns (and series), and for the
        shipped model, and for seasonal naive from its in-sample errors, each interval's coverage, width and MSIS
        (`coverage_80`, `width_80`, `msis_80`, ...)."""
        rows = []
        for name, scores in self.scores.items():
            row = {"forecaster": name, **scores["mean"]}
            for tag, interval in self.intervals.items():
                own = interval if name == "model" else interval.get(name)
                if own:
                    row |= {f"{key}_{tag}": own[key] for key in ("coverage", "width", "msis")}
            rows.append(row)
        return pd.DataFrame(rows)


def evaluate(predictor: Predictor, data: Prepared, split: str = "test") -> EvalReport:
    """Score the predictor's shipped forecast on every stride-1 window of `split` (test, or val to compare runs
    on validation) of `data` (read by `Predictor.read`), beside the naive forecasters and their intervals."""
    check_split(split)
    context_len, horizon = predictor.context_len, predictor.horizon
    windows = data.split_windows(split)
    cut = windows.split(context_len)  # masks None: all observed
    truth, truth_observed = cut.target, cut.target_observed
    ids = windows.series()  # (N,) each window's series
    shipped = predictor.forecast(cut, ids)
    season = predictor.season
    forecasts = {"model": shipped.point}  # (N, H, C) each: what predict ships, then the model alone where it differs
    if (shipped.chosen != "model").any():
        forecasts["model_alone"] = shipped.each["model"]
    forecasts |= {name: f for name, f in shipped.each.items() if name != "model"}
    scales = data.mase_scales(season, split)  # (n_ids, C)
    scored = np.unique(ids)  # the series with a window in the split
    stats = shipped.mean, shipped.std, scales[ids]  # (N, C) each
    truth_mask = None if truth_observed is None else truth_observed.numpy()
    columns = predictor.layout.targets
    scores = {
        name: score(f.numpy(), truth.numpy(), *stats[:2], columns, stats[2], truth_mask)
        for name, f in forecasts.items()
    }
    levels = predictor.interval_levels
    naive_widths = seasonal_naive_widths(data, season, horizon, levels)[:, ids]  # (levels, N, H, C)
    intervals = _interval_scores(columns, shipped, naive_widths, truth, truth_observed, stats)
    by_series = None
    if predictor.id_cols:
        by_series = _series_table(forecasts, truth.numpy(), stats, truth_mask, ids, data.frame)
    return EvalReport(
        split,
        len(windows),
        context_len,
        horizon,
        season,
        columns,
        scores,
        () if predictor.fallback is None else predictor.fallback.choice,
        intervals,
        quantile_loss=_quantile_scores(shipped, cut, predictor.config.train.quantiles),
        n_series=len(scored),
        worst_series=_worst(by_series, predictor.id_cols) if by_series is not None else [],
        by_series=by_series,
        windows=ScoredWindows(cut.context, truth, shipped.point, ids),
        intervals_note="" if predictor.calibration is None else predictor.calibration.note(),
        mase_note=_mase_note(scales, scored, data.frame),
        smape_note=_smape_note(
            truth, truth_observed, shipped.mean, shipped.std, columns, "test" if split == "test" else "validation"
        ),
        after_note=_after_note(data) if split == "test" else "",
        unscored_note=_unscored_note(scored, data.frame, "test" if split == "test" else "validation"),
    )


def _unscored_note(scored: np.ndarray, frame: SeriesFrame, split: str) -> str:
    """One line naming the series with no window in the split (too short, or started late; "" when none)."""
    unscored = np.setdiff1d(np.arange(frame.n_ids), scored)
    if not len(unscored):
        return ""
    return (
        f"{len(unscored)} of {frame.n_ids} series have no {split} window and are not scored "
        f"({_first_names(frame, unscored)}): too short for one, or ended before the split"
    )


def _after_note(data: Prepared) -> str:
    """One line on the rows after each series' test split, which evaluate does not score ("" when none)."""
    after = data.frame.lengths - data.borders.test_end  # (n_ids,)
    if not (after > 0).any():
        return ""
    where = f" in {int((after > 0).sum())} series" if data.frame.is_panel else ""
    return (
        f"{int(after.sum()):,} rows after the test split{where} are not scored (evaluate scores the run's own split; "
        "backtest on this data forecasts over them)"
    )


def _mase_note(scales: np.ndarray, scored: np.ndarray, frame: SeriesFrame) -> str:
    """One line on the scored series (`scored`, indexes) with no MASE scale in some column ("" when none)."""
    unscaled = scored[np.isnan(scales[scored]).any(axis=1)]
    if not len(unscaled):
        return ""
    return (
        f"MASE and MSIS leave out {len(unscaled)} of {len(scored)} series ({_first_names(frame, unscaled)}): their "
        "rows before the test split hold no seasonal-naive error to scale by (too short, or constant)"
    )


def _first_names(frame: SeriesFrame, series: np.ndarray) -> str:
    """The first five of `series` (indexes) by name: "'a', 'b', ..."."""
    return ", ".join(repr(frame.names[i]) for i in series[:5]) + (", ..." if len(series) > 5 else "")


def _smape_note(
    truth: torch.Tensor,
    observed: torch.Tensor | None,
    mean: np.ndarray,
    std: np.ndarray,
    columns: tuple[str, ...],
    split: str,
) -> str:
    """One line where at least ZERO_SHARE_NOTED of a column's scored points (truth (N, H, C) scaled; `mean`, `std`
    (N, C) each window's) are zero in the data's units, where sMAPE scores any other forecast 200 % ("" where no
    column has so many)."""
    zero = torch.from_numpy(-mean / std).unsqueeze(1)  # (N, 1, C) scaled: the value 0
    scored = torch.ones_like(truth, dtype=torch.bool) if observed is None else observed
    zeros = (near_zero(truth, zero) & scored).sum(dim=(0, 1))  # (C,)
    shares = (zeros / scored.sum(dim=(0, 1)).clamp(min=1)).tolist()
    noted = [(name, share) for name, share in zip(columns, shares, strict=True) if share >= ZERO_SHARE_NOTED]
    if not noted:
        return ""
    if len(columns) == 1:
        where = f"{noted[0][1]:.0%} of {split} points are 0"
    else:
        where = f"{split} points are 0 ({', '.join(f'{name}: {share:.0%}' for name, share in noted)})"
    return (
        f"sMAPE: {where}, where a forecast of exactly 0 scores 0 % and any other 200 %, so it favours forecasts "
        "of 0; compare MAE and MASE on such data"
    )


def write_report(report: EvalReport, data: Prepared, run_dir: Path) -> None:
    """metrics.json, metrics_by_series.csv (many series) and test_windows.png into `run_dir`."""
    atomic_write_text(run_dir / "metrics.json", json.dumps(report.to_dict(), indent=2))
    if report.by_series is not None:
        atomic_write_text(run_dir / "metrics_by_series.csv", report.by_series.to_csv(index=False))
    w = report.windows
    _plot_windows(w.context, w.truth, w.forecast, data, w.ids, report.by_series, run_dir / "test_windows.png")


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
        out[:, i] /= data.scaler.first(n_targets).std[i]
    widest = np.nanmax(np.where(np.isnan(out), -np.inf, out), axis=(1, 2), keepdims=True)
    return np.where(np.isnan(out), np.maximum(widest, 0), out)


def _interval_scores(
    columns: tuple[str, ...],
    shipped: Forecasts,
    naive_widths: np.ndarray,
    truth: torch.Tensor,
    observed: torch.Tensor | None,
    stats: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> dict[str, dict]:
    """Per calibrated level: the share of observed test truth inside the shipped interval (nominal: the level),
    its mean width in the data's units, and its MSIS (M4's interval score over the MASE scale); per column and
    averaged; and the same for seasonal naive with its in-sample intervals (`naive_widths` (levels, N, H, C)),
    both as shipped: not below the forecasts' floor. stats: each window's (mean, std, MASE scale), (N, C) each."""
    out: dict[str, dict] = {}
    if shipped.half_widths is None:
        return out
    _, std, scale = stats
    y = truth.numpy()
    mask = None if observed is None else observed.numpy()

    def scores(lower: np.ndarray, upper: np.ndarray, level: float) -> dict:
        """lower, upper: (N, H, C), scaled."""
        share, _ = coverage(torch.from_numpy(lower), torch.from_numpy(upper), truth, observed)
        width_units = ((upper - lower) * std[:, None]).mean(axis=(0, 1))  # (C,)
        interval_scores = [
            msis(lower[..., j : j + 1], upper[..., j : j + 1], y[..., j : j + 1],
                 None if mask is None else mask[..., j : j + 1], std[:, j : j + 1], scale[:, j : j + 1], level)
            for j in range(len(columns))
        ]  # fmt: skip
        return {
            "coverage": float(np.mean(share)),
            "width": float(np.mean(width_units)),
            "msis": mean_defined(interval_scores),
            "per_column": {
                name: {"coverage": float(share[j]), "width": float(width_units[j]), "msis": interval_scores[j]}
                for j, name in enumerate(columns)
            },
        }

    naive = shipped.each["seasonal_naive"].numpy()
    naive_bounds = interval_bounds(naive, naive_widths.astype(np.float32), shipped.levels, shipped.floor)
    for (level, lower, upper), (_, naive_lower, naive_upper) in zip(shipped.scaled_bounds(), naive_bounds, strict=True):
        out[label(level)] = {
            "nominal": level,
            **scores(lower, upper, level),
            "seasonal_naive": scores(naive_lower, naive_upper, level),
        }
    return out


def _quantile_scores(shipped: Forecasts, cut, quantiles: tuple[float, ...]) -> dict:
    """The weighted quantile loss of the shipped quantiles (with --quantiles: the model's, conformally adjusted)
    and the coverage of each (q, 1 - q) pair; without quantiles, of those the intervals imply (the point
    forecast as the median)."""
    mean, std = shipped.mean, shipped.std
    truth = cut.target.numpy()
    mask = None if cut.target_observed is None else cut.target_observed.numpy()
    if shipped.quantiles is None:
        if shipped.half_widths is None:
            return {}
        implied = interval_quantiles(shipped.point.numpy(), shipped.scaled_bounds())
        return {
            "source": "intervals",
            "quantiles": [round(q, 10) for q, _ in implied],  # (1 - 0.95) / 2 is 0.025000000000000022
            "wql": quantile_loss(implied, truth, mask, mean, std),
        }
    levels = sorted(quantiles)
    adjusted = shipped.quantiles.numpy()  # (N, H, C, Q)
    inside = {}
    for lo, hi in quantile_pairs(quantiles):
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
    """Three scored windows of the last column, titled with the date of their first forecast step: for one
    series, the first, middle and last; for many, those of the series with the lowest, the median and the
    highest model MASE."""
    from tsformer.plots import plot_windows

    frame = data.frame
    j = len(frame.columns) - 1  # the last column (often the target of interest, e.g. OT)
    column = frame.columns[j]
    starts, _ = data.target_starts("test")
    if by_series is None or by_series.empty:
        picks = np.linspace(0, len(contexts) - 1, 3).round().astype(int).tolist()
        titles = [f"{column}, forecast from {_when(frame, starts[i])}" for i in picks]
    else:
        ranked = by_series[by_series["column"] == column].dropna(subset=["mase"]).sort_values("mase")
        chosen = ranked.iloc[[0, len(ranked) // 2, len(ranked) - 1]]
        names = ["/".join(str(v) for v in row) for row in chosen[list(frame.id_cols)].itertuples(index=False)]
        series = [frame.names.index(name) for name in names]
        picks = [int(np.flatnonzero(ids == i)[-1]) for i in series]
        titles = [
            f"{column} of series {name!r} ({rank} MASE, {m:.3g}), forecast from {_when(frame, starts[k])}"
            for name, rank, m, k in zip(names, ("lowest", "median", "highest"), chosen["mase"], picks, strict=True)
        ]
    std, mean = data.scaler.std[ids[picks], j], data.scaler.mean[ids[picks], j]  # (3,)

    def original(x: torch.Tensor) -> np.ndarray:
        return x[picks, :, j].numpy() * std[:, None] + mean[:, None]

    plot_windows(original(contexts), original(truth), original(forecast), titles, column, path)


def _when(frame: SeriesFrame, row: int) -> str:
    """The timestamp of a row of the frame, as text (a date alone for daily and longer data)."""
    return as_text(frame.timestamps[[int(row)]], frame.timestamps)[0]


def format_report(report: EvalReport) -> str:
    """A table: one row per forecaster, averaged over columns, then the model per column (and, for many
    series, the ten worst series)."""
    name = "test" if report.split == "test" else "validation"
    series = f" in {report.n_series} series" if report.worst_series or report.n_series > 1 else ""
    windows = f"{name} windows: {report.n_windows} (every window, stride 1){series}"
    lines = [
        f"{windows}   context_len {report.context_len}   horizon {report.horizon}   season {report.season}",
        *([report.after_note] if report.after_note else []),  # first: the rows given that no figure below scores
        *([report.unscored_note] if report.unscored_note else []),
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
            uses = f"a candidate, a blend or a weighted mean in {naive} of {len(names)} series"
            fallen_back.append(f"{column} uses {uses}")
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
    if report.intervals_note:
        lines.append(report.intervals_note)
    if report.mase_note:
        lines.append(report.mase_note)
    if report.smape_note:
        lines.append(report.smape_note)
    for tag, interval in report.intervals.items():
        lines.append(
            f"{tag} % interval (conformal, calibrated on validation): "
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
    lines += ["", "model per column (MAE and RMSE orig in each column's own units):"]
    width = max(14, *map(len, report.columns))  # whole names: "%UNWEIGHTED ILI" and "% WEIGHTED ILI" differ late
    for column, m in report.scores["model"]["per_column"].items():
        lines.append(f"  {column:<{width}}{_metrics_row(m)}")
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
