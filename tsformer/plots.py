"""PNG figures: the loss curve, test windows and a forecast. Headless (Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

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
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole epochs
    ax.set_ylabel("loss (scaled units)")
    ax.set_title("Training history")
    ax.legend()
    _save(fig, path)


def plot_windows(
    context: np.ndarray, truth: np.ndarray, forecast: np.ndarray, titles: list[str], column: str, path: Path
) -> None:
    """A few test windows of one column: history, truth and forecast, each (n, steps), one title each."""
    fig, axes = plt.subplots(len(titles), 1, figsize=(8, 2.2 * len(titles)), squeeze=False, constrained_layout=True)
    for i, (ax, title) in enumerate(zip(axes[:, 0], titles, strict=True)):
        L, H = context.shape[1], truth.shape[1]
        ax.plot(range(-L, 0), context[i], color="black", linewidth=0.8, label="history")
        ax.plot(range(H), truth[i], color="tab:green", label="truth")
        ax.plot(range(H), forecast[i], color="tab:red", label="forecast (as shipped)")
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(column, fontsize=8)
    axes[0, 0].legend(fontsize=8)
    axes[-1, 0].set_xlabel("steps from the forecast origin")
    _save(fig, path)


def plot_forecast(panels: list[tuple[str, pd.Series, pd.DataFrame]], title: str, path: Path | BinaryIO) -> None:
    """One panel per (label, recent history, forecast): the history, the forecast and its intervals (the
    forecast's columns lower_L / upper_L) as a fan, and what made it (its column forecaster), each panel on
    its own time axis (series of a long file cover their own dates)."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.4 * len(panels)), squeeze=False, constrained_layout=True)
    for ax, (label, history, forecast) in zip(axes[:, 0], panels, strict=True):
        ax.plot(history.index, history.to_numpy(), color="black", linewidth=0.8, label="history")
        levels = sorted((c.removeprefix("lower_") for c in forecast.columns if c.startswith("lower_")), key=float)
        for shade, level in zip(np.linspace(0.45, 0.22, len(levels)), levels, strict=True):
            ax.fill_between(
                forecast.index, forecast[f"lower_{level}"], forecast[f"upper_{level}"], color="tab:red", alpha=shade,
                linewidth=0, label=f"{level} %",
            )  # fmt: skip
        ax.plot(forecast.index, forecast["forecast"], color="tab:red", label="forecast")
        ax.set_title(f"forecast by {forecast['forecaster'].iloc[0]}", fontsize=8, loc="right")
        ax.set_ylabel(label, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        if isinstance(forecast.index, pd.DatetimeIndex):  # short labels that never overlap: 12:00, Oct 01, 2024
            locator = AutoDateLocator(maxticks=9)
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    _save(fig, path)


def plot_backtest(summary: pd.DataFrame, path: Path | BinaryIO) -> None:
    """MASE of each forecaster at each backtest origin (summary: origin, forecaster, mase rows)."""
    fig, ax = plt.subplots(figsize=(8, 3.5), constrained_layout=True)
    groups = dict(tuple(summary.groupby("forecaster", sort=False)))
    origins = summary["origin"].drop_duplicates().tolist()
    position = {origin: k for k, origin in enumerate(origins)}  # a forecaster some folds lack keeps its origins
    for name, rows in groups.items():  # the naive ones first, dashed; the model last, on top (it may equal one)
        if name != "model":
            x = rows["origin"].map(position)
            ax.plot(x, rows["mase"], marker=".", linestyle="--", linewidth=1, label=name)
    rows = groups["model"]
    ax.plot(
        rows["origin"].map(position), rows["mase"], marker="o", color="black", linewidth=2, label="model (shipped)",
        zorder=3,
    )  # fmt: skip
    labels = [" to ".join(part[:16] for part in o.split(" to ")) for o in origins]  # minutes, or a span of them
    ax.set_xticks(range(len(origins)), labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("MASE")
    ax.set_title("Backtest: error by origin")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # beside, off the lines
    _save(fig, path)
