"""The only code that knows the checkpoint file format.

One file holds everything `evaluate`, `predict` and `check` need: weights, resolved config,
scaler, columns, time column, frequency, split borders, a fingerprint of the data, versions. Files are
written atomically (temp file + rename) and read with `weights_only=True`, so loading never
runs code from the file.
"""

from __future__ import annotations

import io
import pickle
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tsformer import __version__
from tsformer.config import Config, config_from_dict, to_dict
from tsformer.data import Scaler, SplitBorders, parse_freq
from tsformer.data.calendar import calendar_names
from tsformer.data.prepare import Split
from tsformer.errors import CheckpointError, TsformerError
from tsformer.fallback import FORECASTERS, season_for
from tsformer.files import atomic_write
from tsformer.intervals import forecast_scale, half_widths, quantile_pairs
from tsformer.model import ForecasterBase, build_forecaster

FORMAT_NAME = "tsformer-checkpoint"
FORMAT_VERSION = 5  # 2: data fingerprint, renamed weights. 3: many series, covariates. 4: fallback per series.
# 5: interval widths per unit of each window's scale (train.interval_scale)
MODEL_FILE = "model.pt"  # best weights, for evaluate/predict/check
LAST_FILE = "last.pt"  # latest epoch with optimizer and RNG state, for --resume
CALIBRATION_DIR = "calibration"  # the run folder of the model whose errors calibrate the intervals (refit)


@dataclass(frozen=True)
class Checkpoint:
    config: Config
    columns: tuple[str, ...]
    time_col: str
    freq: str
    scaler: Scaler  # (n_ids, C) statistics
    borders: SplitBorders  # per series
    model_state: dict[str, torch.Tensor]
    id_cols: tuple[str, ...] = ()  # long format's id columns; () for a wide file
    series: tuple[tuple[str, ...], ...] = ((),)  # each trained series' id values (((),) for a wide file)
    past_covs: tuple[str, ...] = ()  # past-only covariates the model reads
    future_covs: tuple[str, ...] = ()  # known-future ones from the data
    calendar: tuple[str, ...] = ()  # known-future calendar features derived from the timestamps
    data_fingerprint: dict[str, str | int] = field(default_factory=dict)  # the data it was trained on
    fallback: tuple[tuple[str, ...], ...] = ()  # per series and column, the forecaster chosen on validation; () = model
    interval_levels: tuple[float, ...] = ()  # conformal interval levels (tsformer.intervals)
    interval_widths: torch.Tensor | None = None  # (n_levels, H, C) half-widths, scaled units (x each window's
    # scale with train.interval_scale=seasonal: tsformer.intervals.half_widths)
    interval_scale_typical: torch.Tensor | None = None  # (C,) the median validation window's scale; None: fixed
    quantile_adjust: torch.Tensor | None = None  # (n_pairs, H, C) conformal widening of each (q, 1 - q) pair
    train_state: dict[str, Any] | None = None  # optimizer, epoch, RNG, history; only in last.pt
    package_version: str = __version__

    def build_model(self) -> ForecasterBase:
        model = build_forecaster(
            self.config.model,
            len(self.columns),
            self.config.train.loss,
            len(self.past_covs),
            len(self.future_covs) + len(self.calendar),
            self.config.train.quantiles,
        )
        try:
            model.load_state_dict(self.model_state)
        except RuntimeError as exc:
            raise CheckpointError(
                f"checkpoint weights do not fit its own config ({str(exc).splitlines()[0]})"
            ) from None
        model.eval()
        return model

    def interval_half_widths(self, windows: Split) -> np.ndarray | None:
        """The conformal half-widths of `windows`, scaled units: (n_levels, N, H, C), or (n_levels, 1, H, C) when
        they do not depend on the window (train.interval_scale=fixed); None for a run without intervals. Each
        window's scale uses the season that calibration did (season_for of the run's frequency and context)."""
        if self.interval_widths is None or not self.interval_levels:
            return None
        season = season_for(self.freq, self.config.model.context_len)
        scale = forecast_scale(self.interval_scale_typical, windows.context, windows.context_observed, season)
        return half_widths(self.interval_widths, scale).numpy()


def save_checkpoint(ckpt: Checkpoint, path: str | Path) -> None:
    """Write atomically: a kill or a full disk at any moment leaves either the old file or the new one.

    The payload is serialised in memory first, so a failed write is an OSError naming `path`
    (torch's zip writer would report a full disk as a RuntimeError).
    """
    payload = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "package_version": ckpt.package_version,
        "config": to_dict(ckpt.config),
        "columns": list(ckpt.columns),
        "time_col": ckpt.time_col,
        "freq": ckpt.freq,
        "id_cols": list(ckpt.id_cols),
        "series": [list(key) for key in ckpt.series],
        "past_covs": list(ckpt.past_covs),
        "future_covs": list(ckpt.future_covs),
        "calendar": list(ckpt.calendar),
        "scaler": ckpt.scaler.to_dict(),
        "borders": ckpt.borders.to_list(),
        "data_fingerprint": dict(ckpt.data_fingerprint),
        "fallback": [list(row) for row in ckpt.fallback],
        "interval_levels": list(ckpt.interval_levels),
        "interval_widths": ckpt.interval_widths,
        "interval_scale_typical": ckpt.interval_scale_typical,
        "quantile_adjust": ckpt.quantile_adjust,
        "model_state": {k: v.detach().cpu() for k, v in ckpt.model_state.items()},
        "train_state": ckpt.train_state,
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    atomic_write(path, lambda handle: handle.write(buffer.getbuffer()))


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint without executing code from it; any problem is a CheckpointError."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} not found; train a model first or check the run folder")
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickle protocols before refusing them
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except (
        pickle.UnpicklingError,
        RuntimeError,
        EOFError,
        zipfile.BadZipFile,
        ValueError,
        AttributeError,
        TypeError,
        KeyError,
        IndexError,
        OSError,
        UnicodeDecodeError,
        MemoryError,
    ) as exc:
        raise CheckpointError(
            f"{path} is not a loadable tsformer checkpoint (corrupt, truncated, or holding code: "
            f"{_load_failure(exc)}); retrain or use the original file"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_NAME:
        raise CheckpointError(f"{path} is not a tsformer checkpoint; give the model.pt of a tsformer run")
    version = payload.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has checkpoint format {version} but this tsformer ({__version__}) reads format "
            f"{FORMAT_VERSION}; use a matching tsformer version or retrain"
        )
    try:
        ckpt = Checkpoint(
            config=config_from_dict(payload["config"]),
            columns=tuple(payload["columns"]),
            time_col=payload["time_col"],
            freq=payload["freq"],
            scaler=Scaler.from_dict(payload["scaler"]),
            borders=SplitBorders.from_list(payload["borders"]),
            id_cols=tuple(payload["id_cols"]),
            series=tuple(tuple(key) for key in payload["series"]),
            past_covs=tuple(payload["past_covs"]),
            future_covs=tuple(payload["future_covs"]),
            calendar=tuple(payload["calendar"]),
            model_state=payload["model_state"],
            data_fingerprint=payload["data_fingerprint"],
            fallback=tuple(tuple(row) for row in payload.get("fallback") or ()),  # () = the model everywhere
            interval_levels=tuple(float(level) for level in payload.get("interval_levels") or ()),
            interval_widths=payload.get("interval_widths"),
            interval_scale_typical=payload.get("interval_scale_typical"),
            quantile_adjust=payload.get("quantile_adjust"),
            train_state=payload.get("train_state"),
            package_version=str(payload.get("package_version", "")),
        )
        _validate(ckpt)
    except (KeyError, TypeError, ValueError, TsformerError) as exc:
        detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise CheckpointError(
            f"{path} is a damaged tsformer checkpoint ({detail}); retrain or use the original file"
        ) from None
    return ckpt


def _validate(ckpt: Checkpoint) -> None:
    """Every field is of its type and agrees with the others; raises ValueError or TsformerError."""
    columns = ckpt.columns
    if not columns or not all(isinstance(c, str) and c for c in columns) or len(set(columns)) != len(columns):
        raise ValueError(f"columns must be distinct names, got {list(columns)}")
    if not isinstance(ckpt.time_col, str) or not ckpt.time_col or ckpt.time_col in columns:
        raise ValueError(f"time column {ckpt.time_col!r} must be a name other than the columns'")
    if not isinstance(ckpt.freq, str):
        raise ValueError(f"frequency {ckpt.freq!r} is not text")
    parse_freq(ckpt.freq, "its frequency")
    id_cols, series = ckpt.id_cols, ckpt.series
    if not all(isinstance(c, str) and c for c in id_cols) or set(id_cols) & {*columns, ckpt.time_col}:
        raise ValueError(f"id columns {list(id_cols)} must be names other than the time and target columns")
    if not series or not all(
        isinstance(key, tuple) and len(key) == len(id_cols) and all(isinstance(v, str) for v in key) for key in series
    ):
        raise ValueError(f"series ids must be {len(id_cols)} names each")
    if len(set(series)) != len(series):
        raise ValueError("series ids must be distinct")
    covariates = (*ckpt.past_covs, *ckpt.future_covs)
    if not all(isinstance(c, str) and c for c in covariates) or len(set(covariates)) != len(covariates):
        raise ValueError(f"covariates {list(covariates)} must be distinct names")
    expected = calendar_names(ckpt.freq, ckpt.config.data.calendar, ckpt.config.model.cycle)
    if ckpt.calendar != expected:
        raise ValueError(f"calendar features {list(ckpt.calendar)} must be {list(expected)} for frequency {ckpt.freq}")
    shape = (len(series), len(columns) + len(covariates))  # calendar features are not scaled
    mean, std = ckpt.scaler.mean, ckpt.scaler.std
    if mean.shape != shape or std.shape != shape:
        raise ValueError(
            f"scaler has {mean.shape} means and {std.shape} stds for {shape[0]} series x {shape[1]} columns"
        )
    if not (np.isfinite(mean).all() and np.isfinite(std).all() and (std > 0).all()):
        raise ValueError("scaler statistics must be finite with positive stds")
    ends = np.stack([ckpt.borders.train_end, ckpt.borders.val_end, ckpt.borders.test_end])  # (3, n_ids)
    if ends.shape != (3, len(series)) or ends.dtype.kind != "i" or not (np.diff(ends, axis=0) >= 0).all():
        raise ValueError(f"split borders must be increasing row numbers, one set per series, got {ends.tolist()[:3]}")
    if not id_cols and not 0 < ends[0, 0] < ends[1, 0] < ends[2, 0]:
        raise ValueError(f"split borders {ends[:, 0].tolist()} must be increasing row numbers")
    fingerprint = ckpt.data_fingerprint
    if not isinstance(fingerprint, dict) or set(fingerprint) != {"rows", "first", "last", "sha256"}:
        raise ValueError("data fingerprint must hold rows, first, last and sha256")
    if ckpt.fallback and (
        len(ckpt.fallback) != len(series)
        or any(len(row) != len(columns) or not set(row) <= set(FORECASTERS) for row in ckpt.fallback)
    ):
        raise ValueError(f"fallback must name one of {', '.join(FORECASTERS)} per series and column")
    widths, horizon = ckpt.interval_widths, ckpt.config.model.horizon
    if ckpt.interval_levels and not (
        isinstance(widths, torch.Tensor) and widths.shape == (len(ckpt.interval_levels), horizon, len(columns))
    ):
        raise ValueError(f"interval widths must be (levels, horizon, columns) for levels {list(ckpt.interval_levels)}")
    typical, scaled = ckpt.interval_scale_typical, ckpt.config.train.interval_scale == "seasonal"
    if (typical is not None) != (scaled and bool(ckpt.interval_levels)) or (
        typical is not None
        and not (isinstance(typical, torch.Tensor) and typical.shape == (len(columns),) and bool((typical > 0).all()))
    ):
        raise ValueError("the typical interval scale must be one positive value per column, with seasonal intervals")
    adjust, pairs = ckpt.quantile_adjust, quantile_pairs(ckpt.config.train.quantiles)
    if adjust is not None and not (
        isinstance(adjust, torch.Tensor) and adjust.shape == (len(pairs), horizon, len(columns))
    ):
        raise ValueError(f"quantile adjustments must be (pairs, horizon, columns) for the pairs {pairs}")
    state = ckpt.model_state
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError("model weights must be a mapping of names to tensors")
    train_state = ckpt.train_state
    if train_state is not None and not (
        isinstance(train_state, dict) and {"optimizer", "rng", "loop"} <= set(train_state)
    ):
        raise ValueError("training state must hold optimizer, rng and loop")
    ckpt.build_model()


def _load_failure(exc: Exception) -> str:
    """One line on why torch.load failed, without torch's advice to retry with weights_only=False."""
    text = str(exc).strip()
    if "Weights only load failed" in text:
        lines = [line for line in text.splitlines()[1:] if line.strip() and not line.startswith(("Please", "Check"))]
        detail = lines[-1].strip() if lines else "not plain data"
        return f"refused to unpickle it, {detail[:120]}"
    return text.splitlines()[0][:160] if text else type(exc).__name__


def resolve_checkpoint(run: str | Path) -> Path:
    """A run folder (its model.pt) or a checkpoint file."""
    run = Path(run)
    if run.is_dir():
        path = run / MODEL_FILE
        if not path.is_file():
            raise CheckpointError(
                f"run folder {run} has no {MODEL_FILE}; train into it first (tsformer train ... --out {run})"
            )
        return path
    if run.is_file():
        return run
    raise CheckpointError(f"run {run} not found; give a run folder made by tsformer train")
