"""`evaluate(run)`: honest metrics on every test window, beside naive baselines."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tsformer.checkpoint import Checkpoint, load_checkpoint, resolve_checkpoint
from tsformer.config import with_data_path
from tsformer.data import Prepared, prepare
from tsformer.errors import DataError
from tsformer.fallback import all_forecasts, apply, season_for
from tsformer.files import atomic_write_text
from tsformer.intervals import coverage, label
from tsformer.leakage import check_scaler
from tsformer.metrics import mase_scale, score


@dataclass(frozen=True)
class EvalReport:
    n_windows: int
    context_len: int
    horizon: int
    season: int
    columns: tuple[str, ...]
    scores: dict[str, dict]  # "model" (with its fallback), "repeat_last", "seasonal_naive" -> score()
    fallback: tuple[str, ...] = ()  # per column, the forecaster chosen on validation
    intervals: dict[str, dict] = dataclasses.field(default_factory=dict)  # level label -> coverage and width

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def load_run_data(ckpt: Checkpoint, csv: str | Path | None = None) -> Prepared:
    """The run's CSV (or `csv`), read with the run's columns, frequency, scaler and split borders.

    It must reach the end of the run's test split and hold the training rows the scaler was fit on.
    """
    cfg = ckpt.config
    if csv is not None:
        cfg = with_data_path(cfg, csv)
    data = prepare(cfg, scaler=ckpt.scaler, columns=ckpt.columns, freq=ckpt.freq)
    if data.frame.n_rows < ckpt.borders.test_end:
        raise DataError(
            f"{cfg.data.path} has {data.frame.n_rows} rows but the run's test split ends at row "
            f"{ckpt.borders.test_end}; use the CSV the model was trained on"
        )
    data = dataclasses.replace(data, borders=ckpt.borders)
    if not check_scaler(data.frame.values, data.borders, data.scaler).passed:
        raise DataError(
            f"the training rows of {cfg.data.path} differ from those the run was trained on; "
            "use the CSV the model was trained on"
        )
    return data


def evaluate(run: str | Path, csv: str | Path | None = None, write: bool = True) -> EvalReport:
    """Score the run's best model on every stride-1 test window; write metrics.json and a PNG."""
    path = resolve_checkpoint(run)
    ckpt = load_checkpoint(path)
    data = load_run_data(ckpt, csv)
    model = ckpt.build_model()
    context_len, horizon = ckpt.config.model.context_len, ckpt.config.model.horizon
    windows = data.split_windows("test", context_len, horizon)
    contexts, truth, contexts_observed, truth_observed = windows.split(context_len)  # masks None: all observed
    season = season_for(ckpt.freq, context_len)
    forecasts = all_forecasts(model, contexts, contexts_observed, season)  # (N, H, C) each
    forecasts["model"] = apply(ckpt.fallback, forecasts)  # what predict gives: the validation choice per column
    denominator = mase_scale(data.frame.values[: data.borders.train_end], season)
    truth_mask = None if truth_observed is None else truth_observed.numpy()
    scores = {
        name: score(f.numpy(), truth.numpy(), data.scaler.std, data.frame.columns, denominator, truth_mask)
        for name, f in forecasts.items()
    }
    intervals = _interval_scores(ckpt, forecasts["model"], truth, truth_observed, data)
    report = EvalReport(
        len(windows), context_len, horizon, season, data.frame.columns, scores, ckpt.fallback, intervals
    )
    if write:
        run_dir = path.parent
        atomic_write_text(run_dir / "metrics.json", json.dumps(report.to_dict(), indent=2))
        _plot_windows(contexts, truth, forecasts["model"], data, run_dir / "test_windows.png")
    return report


def _interval_scores(
    ckpt: Checkpoint, forecast: torch.Tensor, truth: torch.Tensor, observed: torch.Tensor | None, data: Prepared
) -> dict[str, dict]:
    """Per calibrated level: the share of observed test truth inside the interval (nominal: the level) and its
    mean width in the CSV's units, per column and averaged over columns."""
    out = {}
    widths = [] if ckpt.interval_widths is None else ckpt.interval_widths  # (n_levels, H, C), scaled
    for level, width in zip(ckpt.interval_levels, widths, strict=True):
        share, _ = coverage(forecast, truth, observed, width)
        width_units = 2 * width.mean(dim=0).numpy() * data.scaler.std  # (C,)
        per_column = {
            name: {"coverage": float(share[j]), "width": float(width_units[j])} for j, name in enumerate(ckpt.columns)
        }
        out[label(level)] = {
            "nominal": level,
            "coverage": float(np.mean(share)),
            "width": float(np.mean(width_units)),
            "per_column": per_column,
        }
    return out


def _plot_windows(contexts, truth, forecast, data: Prepared, path: Path) -> None:
    from tsformer.plots import plot_windows

    picks = np.linspace(0, len(contexts) - 1, 3).round().astype(int).tolist()
    j = len(data.frame.columns) - 1  # the last column (often the target of interest, e.g. OT)
    std, mean = data.scaler.std[j], data.scaler.mean[j]
    starts = data.target_starts("test", contexts.shape[1], truth.shape[1])

    def original(x: torch.Tensor) -> np.ndarray:
        return x[picks, :, j].numpy() * std + mean

    plot_windows(
        original(contexts),
        original(truth),
        original(forecast),
        data.frame.columns[j],
        [int(starts[i]) for i in picks],
        path,
    )


def format_report(report: EvalReport) -> str:
    """A table: one row per forecaster, averaged over columns, then the model per column."""
    lines = [
        f"test windows: {report.n_windows} (every window, stride 1)   context_len {report.context_len}   "
        f"horizon {report.horizon}   season {report.season}",
        "",
        f"{'forecaster':<16}{'MSE':>9}{'MAE':>9}{'MAE orig':>12}{'RMSE orig':>12}{'MASE':>8}"
        "   (MSE/MAE on scaled values)",
    ]
    for name, s in report.scores.items():
        m = s["mean"]
        lines.append(
            f"{name:<16}{m['mse']:>9.4f}{m['mae']:>9.4f}{m['mae_original']:>12.4g}"
            f"{m['rmse_original']:>12.4g}{m['mase']:>8.3f}"
        )
    pairs = zip(report.columns, report.fallback, strict=False)  # no fallback recorded: ()
    fallen_back = [f"{column} uses {name}" for column, name in pairs if name != "model"]
    if fallen_back:
        lines.append(f"model row with the fallback chosen on validation: {', '.join(fallen_back)}")
    for tag, interval in report.intervals.items():
        lines.append(
            f"{tag} % interval (conformal, calibrated on validation): coverage {100 * interval['coverage']:.1f} % "
            f"of test points, mean width {interval['width']:.4g} (original units, averaged over columns)"
        )
    lines += ["", "model per column:"]
    for column, m in report.scores["model"]["per_column"].items():
        lines.append(
            f"  {column[:14]:<14}{m['mse']:>9.4f}{m['mae']:>9.4f}{m['mae_original']:>12.4g}"
            f"{m['rmse_original']:>12.4g}{m['mase']:>8.3f}"
        )
    return "\n".join(lines)
