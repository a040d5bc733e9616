"""From a config (or a trained run's metadata) to scaled tensors and split borders."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from tsformer.config import Config, resolve_auto
from tsformer.data.loader import SeriesFrame, read_series
from tsformer.data.split import (
    Scaler,
    SplitBorders,
    make_windows,
    split_borders,
    split_window,
    window_target_starts,
)
from tsformer.errors import DataError
from tsformer.metrics import season_length


@dataclass(frozen=True)
class Windows:
    """Stride-1 windows (views of the scaled series) and, when some cells are unobserved, their mask."""

    values: torch.Tensor  # (n_windows, context_len + horizon, n_series)
    observed: torch.Tensor | None  # same shape, bool; None: every cell observed

    def __len__(self) -> int:
        return len(self.values)

    def take(self, index: torch.Tensor, device: torch.device) -> Windows:
        """The windows at `index` (a batch) and their mask, on `device`."""
        observed = None if self.observed is None else self.observed[index].to(device)
        return Windows(self.values[index].to(device), observed)

    def split(self, context_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(contexts (N, L, C), targets (N, H, C), their masks or None)."""
        contexts, targets = split_window(self.values, context_len)
        if self.observed is None:
            return contexts, targets, None, None
        return contexts, targets, *split_window(self.observed, context_len)


@dataclass(frozen=True)
class Prepared:
    config: Config  # as given, with automatic (0) context_len/patch_len chosen from the data
    frame: SeriesFrame
    borders: SplitBorders
    scaler: Scaler
    scaled: torch.Tensor  # (n_rows, n_series) float32, standardised with the train-only scaler; 0 where unobserved
    observed: torch.Tensor | None  # (n_rows, n_series) bool, False where a cell is unobserved; None: all observed
    fingerprint: dict[str, str | int]  # what a resumed run checks it still reads: see `data_fingerprint`
    notes: tuple[str, ...]  # how the data was read and what was chosen, for the user

    def target_starts(self, split: str, context_len: int, horizon: int):
        return window_target_starts(split, self.borders, context_len, horizon)

    def windows(self, split: str, context_len: int, horizon: int) -> torch.Tensor:
        """(n_windows, context_len + horizon, n_series), a view of `scaled`."""
        return make_windows(self.scaled, self.target_starts(split, context_len, horizon), context_len, horizon)

    def observed_windows(self, split: str, context_len: int, horizon: int) -> torch.Tensor | None:
        """The observed mask of each window, (n_windows, context_len + horizon, n_series); None: all observed."""
        if self.observed is None:
            return None
        return make_windows(self.observed, self.target_starts(split, context_len, horizon), context_len, horizon)

    def split_windows(self, split: str, context_len: int, horizon: int, stride: int = 1) -> Windows:
        """Every `stride`-th window of `split` with its mask."""
        observed = self.observed_windows(split, context_len, horizon)
        return Windows(
            self.windows(split, context_len, horizon)[::stride], None if observed is None else observed[::stride]
        )


def prepare(cfg: Config, scaler: Scaler | None = None, columns: tuple[str, ...] = (), freq: str = "") -> Prepared:
    """Read cfg.data.path, choose automatic model sizes, split it and scale it.

    Training passes no scaler (one is fit on the observed training cells); evaluate/check pass the
    run's scaler, columns and frequency, and the CSV must match them.
    """
    if not cfg.data.path:
        raise DataError("no CSV given; pass a CSV path or set data.path in the config")
    data_cfg = cfg.data if not columns else dataclasses.replace(cfg.data, targets=columns)
    frame = read_series(data_cfg.path, data_cfg, expected_freq=freq)
    notes = frame.notes
    if not cfg.model.resolved:  # the split's room is checked for the horizon alone, then for the chosen context
        train_rows = split_borders(cfg.data, frame.timestamps, 0, cfg.model.horizon).train_end
        cfg, note = resolve_auto(cfg, train_rows, season_length(frame.freq), frame.freq)
        notes += (note,)
    borders = split_borders(cfg.data, frame.timestamps, cfg.model.context_len, cfg.model.horizon)
    if scaler is None:
        train_observed = frame.observed[: borders.train_end].any(axis=0)
        if not train_observed.all():
            name = frame.columns[int(np.flatnonzero(~train_observed)[0])]
            raise DataError(
                f"column {name!r} has no value in the {borders.train_end} training rows, so it cannot be "
                "scaled or learned; give it training data or choose other --target columns"
            )
        scaler = Scaler.fit(frame.values[: borders.train_end])
    scaled = torch.from_numpy(_scale(frame, scaler))
    masked = not cfg.data.fill and not frame.observed.all()
    return Prepared(
        config=cfg,
        frame=frame,
        borders=borders,
        scaler=scaler,
        scaled=scaled,
        observed=torch.from_numpy(frame.observed) if masked else None,
        fingerprint=data_fingerprint(frame),
        notes=notes,
    )


def data_fingerprint(frame: SeriesFrame) -> dict[str, str | int]:
    """Rows, first and last timestamp, and a sha256 of the timestamps and values a model is trained on."""
    digest = hashlib.sha256(frame.timestamps.asi8.tobytes())
    digest.update(np.ascontiguousarray(frame.values).tobytes())
    digest.update("\0".join(frame.columns).encode())
    return {
        "rows": frame.n_rows,
        "first": str(frame.timestamps[0]),
        "last": str(frame.timestamps[-1]),
        "sha256": digest.hexdigest(),
    }


MAX_STANDARD_DEVIATIONS = 1e6


def _scale(frame: SeriesFrame, scaler: Scaler) -> np.ndarray:
    """Standardised float32 values; a value absurdly far from the training rows is a data error."""
    scaled = (frame.values.astype(np.float64) - scaler.mean) / scaler.std
    far = ~(np.abs(scaled) <= MAX_STANDARD_DEVIATIONS) & ~np.isnan(scaled)  # NaN: an unobserved cell
    if far.any():
        row, j = (int(i[0]) for i in np.nonzero(far))
        raise DataError(
            f"column {frame.columns[j]!r} is {frame.values[row, j]:g} at {frame.timestamps[row]}, over "
            f"{MAX_STANDARD_DEVIATIONS:g} standard deviations from the training rows (mean {scaler.mean[j]:g}, "
            f"std {scaler.std[j]:g}); fix the value or rescale the column"
        )
    return np.nan_to_num(scaled, nan=0.0).astype(np.float32)
