"""PNG figures: the loss curve, test windows and a forecast. Headless (Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from tsformer.files import atomic_open  # noqa: E402


def _save(fig, path: Path | BinaryIO) -> None:
    """PNG into a file handle, or atomically into `path`."""
    try:
        if isinstance(path, str | Path):
            with atomic_open(path) as handle:
                fig.savefig(handle, format="png", dpi=110, bbox_inches="tight")
        else:
            fig.savefig(path, format="png", dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)


def plot_history(history: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5), constrained_layout=True)
    if len(history):
        ax.plot(history["epoch"], history["train_loss"], marker="o", label="train")
        ax.plot(history["epoch"], history["val_loss"], marker="o", label="validation (last token)")
        best = history["val_loss"].idxmin()
        ax.axvline(history["epoch"][best], color="grey", linestyle=":", label="best epoch")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss (scaled units)")
    ax.set_title("Training history")
    ax.legend()
    _save(fig, path)


def plot_windows(context: np.ndarray, truth: np.ndarray, forecast: np.ndarray, titles: list[str], path: Path) -> None:
    """A few test windows of one column: history, truth and forecast, each (n, steps), one title each."""
    fig, axes = plt.subplots(len(titles), 1, figsize=(8, 2.2 * len(titles)), squeeze=False, constrained_layout=True)
    for i, (ax, title) in enumerate(zip(axes[:, 0], titles, strict=True)):
        L, H = context.shape[1], truth.shape[1]
        ax.plot(range(-L, 0), context[i], color="black", linewidth=0.8, label="history")
        ax.plot(range(H), truth[i], color="tab:green", label="truth")
        ax.plot(range(H), forecast[i], color="tab:red", label="forecast")
        ax.set_title(title, fontsize=9)
    axes[0, 0].legend(fontsize=8)
    axes[-1, 0].set_xlabel("steps from the forecast origin")
    _save(fig, path)


def plot_forecast(history: pd.DataFrame, forecast: pd.DataFrame, path: Path | BinaryIO) -> None:
    """Recent history and the forecast, one panel per column of `history`, with the forecast's intervals
    (columns NAME_lower_L / NAME_upper_L) as a fan; both frames indexed by timestamp."""
    columns = list(history.columns)
    fig, axes = plt.subplots(
        len(columns), 1, figsize=(9, 2.2 * len(columns)), squeeze=False, sharex=True, constrained_layout=True
    )
    for ax, name in zip(axes[:, 0], columns, strict=True):
        ax.plot(history.index, history[name], color="black", linewidth=0.8, label="history")
        levels = sorted(
            (c[len(f"{name}_lower_") :] for c in forecast.columns if c.startswith(f"{name}_lower_")), key=float
        )
        for shade, level in zip(np.linspace(0.35, 0.15, len(levels)), levels, strict=True):
            lower, upper = forecast[f"{name}_lower_{level}"], forecast[f"{name}_upper_{level}"]
            ax.fill_between(forecast.index, lower, upper, color="tab:red", alpha=shade, linewidth=0, label=f"{level} %")
        ax.plot(forecast.index, forecast[name], color="tab:red", label="forecast")
        ax.set_ylabel(name, fontsize=8)
    axes[0, 0].legend(fontsize=8)
    fig.autofmt_xdate()
    _save(fig, path)


def plot_backtest(summary: pd.DataFrame, path: Path | BinaryIO) -> None:
    """MASE of each forecaster at each backtest origin (summary: origin, forecaster, mase rows)."""
    fig, ax = plt.subplots(figsize=(8, 3.5), constrained_layout=True)
    for name, rows in summary.groupby("forecaster", sort=False):
        ax.plot(range(len(rows)), rows["mase"], marker="o", label=name)
    origins = summary["origin"].drop_duplicates().tolist()
    labels = [" to ".join(part[:16] for part in o.split(" to ")) for o in origins]  # minutes, or a span of them
    ax.set_xticks(range(len(origins)), labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("MASE")
    ax.set_title("Backtest: error by origin")
    ax.legend(fontsize=8)
    _save(fig, path)
