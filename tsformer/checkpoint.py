"""The only code that knows the checkpoint file format.

One file holds everything `evaluate`, `predict` and `check` need: weights, resolved config,
scaler, columns, time column, frequency, split borders, last timestamp, versions. Files are
written atomically (temp file + rename) and read with `weights_only=True`, so loading never
runs code from the file.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tsformer import __version__
from tsformer.config import Config, config_from_dict, to_dict
from tsformer.data import Scaler, SplitBorders
from tsformer.errors import CheckpointError, TsformerError
from tsformer.model import Forecaster

FORMAT_NAME = "tsformer-checkpoint"
FORMAT_VERSION = 1
MODEL_FILE = "model.pt"  # best weights, for evaluate/predict/check
LAST_FILE = "last.pt"  # latest epoch with optimizer and RNG state, for --resume


@dataclass(frozen=True)
class Checkpoint:
    config: Config
    columns: tuple[str, ...]
    time_col: str
    freq: str
    last_timestamp: str
    scaler: Scaler
    borders: SplitBorders
    model_state: dict[str, torch.Tensor]
    filled: dict[str, int] = field(default_factory=dict)
    train_state: dict[str, Any] | None = None  # optimizer, epoch, RNG, history; only in last.pt
    package_version: str = __version__

    def build_model(self) -> Forecaster:
        model = Forecaster(self.config.model, len(self.columns), self.config.train.loss)
        try:
            model.load_state_dict(self.model_state)
        except RuntimeError as exc:
            raise CheckpointError(
                f"checkpoint weights do not fit its own config ({str(exc).splitlines()[0]})"
            ) from None
        model.eval()
        return model


def save_checkpoint(ckpt: Checkpoint, path: str | Path) -> None:
    """Write atomically: a kill at any moment leaves either the old file or the new one."""
    path = Path(path)
    payload = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "package_version": ckpt.package_version,
        "config": to_dict(ckpt.config),
        "columns": list(ckpt.columns),
        "time_col": ckpt.time_col,
        "freq": ckpt.freq,
        "last_timestamp": ckpt.last_timestamp,
        "scaler": ckpt.scaler.to_dict(),
        "borders": ckpt.borders.to_list(),
        "filled": dict(ckpt.filled),
        "model_state": {k: v.detach().cpu() for k, v in ckpt.model_state.items()},
        "train_state": ckpt.train_state,
    }
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


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
        return Checkpoint(
            config=config_from_dict(payload["config"]),
            columns=tuple(payload["columns"]),
            time_col=str(payload["time_col"]),
            freq=str(payload["freq"]),
            last_timestamp=str(payload["last_timestamp"]),
            scaler=Scaler.from_dict(payload["scaler"]),
            borders=SplitBorders(*payload["borders"]),
            model_state=payload["model_state"],
            filled=dict(payload.get("filled") or {}),
            train_state=payload.get("train_state"),
            package_version=str(payload.get("package_version", "")),
        )
    except (KeyError, TypeError, ValueError, TsformerError) as exc:
        raise CheckpointError(
            f"{path} is a damaged tsformer checkpoint ({exc}); retrain or use the original file"
        ) from None


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
