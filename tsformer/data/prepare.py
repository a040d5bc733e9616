"""From a config (or a trained run's metadata) to scaled tensors and split borders."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from tsformer.config import Config, resolve_auto
from tsformer.data.calendar import calendar_features, calendar_names
from tsformer.data.loader import SeriesFrame, read_series
from tsformer.data.split import (
    Scaler,
    SplitBorders,
    make_windows,
    split_borders,
    split_window,
    window_counts,
    window_target_starts,
)
from tsformer.errors import DataError
from tsformer.metrics import season_length
from tsformer.model.covariates import Covariates


class Layout(NamedTuple):
    """The columns of the scaled inputs: the targets, then past-only covariates, then known-future ones:
    the data's, then the calendar features (which are not scaled; the learned cycle's phase is the last)."""

    targets: tuple[str, ...]
    past: tuple[str, ...] = ()
    future: tuple[str, ...] = ()
    calendar: tuple[str, ...] = ()

    @property
    def n_targets(self) -> int:
        return len(self.targets)

    @property
    def known_future(self) -> tuple[str, ...]:
        return self.future + self.calendar


class Split(NamedTuple):
    """Windows cut at their forecast origin: what the model reads and what it must forecast."""

    context: torch.Tensor  # (N, L, C) targets before the origin
    target: torch.Tensor  # (N, H, C) targets after it
    context_observed: torch.Tensor | None  # (N, L, C) bool; None: every cell observed
    target_observed: torch.Tensor | None  # (N, H, C) bool
    covariates: Covariates | None  # past-only over the context, known-future over context and horizon


@dataclass(frozen=True)
class Windows:
    """A batch of windows (materialised, or views of the scaled inputs) and, when some cells are
    unobserved or padding, their mask."""

    values: torch.Tensor  # (n_windows, context_len + horizon, n_inputs): targets, then covariates (`layout`)
    observed: torch.Tensor | None  # same shape, bool; None: every cell observed
    layout: Layout

    def __len__(self) -> int:
        return len(self.values)

    def split(self, context_len: int) -> Split:
        """Targets before and after the origin, their masks, and the covariates each side may be read."""
        c, n_past = self.layout.n_targets, len(self.layout.past)
        contexts, targets = split_window(self.values[..., :c], context_len)
        covariates = None
        if n_past or self.layout.known_future:
            past = self.values[:, :context_len, c : c + n_past] if n_past else None  # never after the origin
            future = self.values[..., c + n_past :] if self.layout.known_future else None
            covariates = Covariates(past, future)
        if self.observed is None:
            return Split(contexts, targets, None, None, covariates)
        return Split(contexts, targets, *split_window(self.observed[..., :c], context_len), covariates)


@dataclass(frozen=True)
class WindowIndex:
    """Where the windows of one split are, sampled lazily from the scaled series (never all materialised).

    Window i forecasts rows starts[i]..starts[i] + horizon - 1 from the context_len rows before; rows
    before its series' first row (floors[i]) are left padding, masked as unobserved.
    """

    source: torch.Tensor  # (n_rows, n_inputs) the scaled inputs, stacked
    source_observed: torch.Tensor | None  # (n_rows, n_inputs) bool; None: every cell observed
    starts: torch.Tensor  # (n_windows,) int64
    floors: torch.Tensor  # (n_windows,) int64
    context_len: int
    horizon: int
    layout: Layout

    def __len__(self) -> int:
        return len(self.starts)

    def every(self, stride: int) -> WindowIndex:
        """Every `stride`-th window."""
        return dataclasses.replace(self, starts=self.starts[::stride], floors=self.floors[::stride])

    def series(self, bounds: np.ndarray) -> np.ndarray:
        """(n_windows,) the index of each window's series, given the frame's `bounds`."""
        return np.searchsorted(bounds, self.floors.numpy(), side="right") - 1

    def take(self, index: torch.Tensor, device: torch.device | str = "cpu") -> Windows:
        """The windows at `index` (a batch), gathered, on `device`."""
        return self._gather(self.starts[index], self.floors[index], device)

    def all(self) -> Windows:
        """Every window: views of the scaled series when they are consecutive and unpadded, else gathered."""
        starts = self.starts.numpy()
        unpadded = bool((self.starts - self.context_len >= self.floors).all())
        if len(starts) and unpadded and np.all(np.diff(starts) == 1):
            values = make_windows(self.source, starts, self.context_len, self.horizon)
            observed = None
            if self.source_observed is not None:
                observed = make_windows(self.source_observed, starts, self.context_len, self.horizon)
            return Windows(values, observed, self.layout)
        return self._gather(self.starts, self.floors, "cpu")

    def split(self, context_len: int) -> Split:
        return self.all().split(context_len)

    def _gather(self, starts: torch.Tensor, floors: torch.Tensor, device: torch.device | str) -> Windows:
        offsets = torch.arange(-self.context_len, self.horizon)  # (L + H,)
        rows = starts[:, None] + offsets  # (B, L + H)
        real = rows >= floors[:, None]  # (B, L + H): False on left padding
        rows = torch.maximum(rows, floors[:, None])
        values = self.source[rows]  # (B, L + H, C)
        padded = not bool(real.all())
        observed = None if self.source_observed is None else self.source_observed[rows]  # (B, L + H, C)
        if padded:
            cells = real.unsqueeze(-1).expand_as(values)
            values = torch.where(cells, values, torch.zeros((), dtype=values.dtype))
            observed = cells if observed is None else observed & cells
        return Windows(values.to(device), None if observed is None else observed.to(device), self.layout)


@dataclass(frozen=True)
class Prepared:
    config: Config  # as given, with automatic (0) context_len/patch_len chosen from the data
    frame: SeriesFrame
    borders: SplitBorders
    scaler: Scaler
    scaled: torch.Tensor  # (n_rows, n_inputs) float32 (`layout`): standardised with the train-only scaler (calendar
    # features as they are); 0 where unobserved
    observed: torch.Tensor | None  # (n_rows, n_inputs) bool, False where a cell is unobserved; None: all observed
    fingerprint: dict[str, str | int]  # what a resumed run checks it still reads: see `data_fingerprint`
    notes: tuple[str, ...]  # how the data was read and what was chosen, for the user
    layout: Layout

    def min_history(self, split: str) -> int:
        """Steps of its series a window needs before its first target: the whole context for a wide file;
        in a panel, training windows need min(context_len, horizon) (shorter ones are left-padded) and
        validation and test windows one step, so every series with a history is scored."""
        context_len, horizon = self.config.model.context_len, self.config.model.horizon
        return panel_min_history(split, context_len, horizon) if self.frame.id_cols else context_len

    def target_starts(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """Each window's first target row and its series' first row, (n_windows,) each."""
        return window_target_starts(
            split, self.borders, self.frame.bounds, self.min_history(split), self.config.model.horizon
        )

    def windows(self, split: str) -> torch.Tensor:
        """Every window of `split`, (n_windows, context_len + horizon, n_inputs)."""
        return self.split_windows(split).all().values

    def observed_windows(self, split: str) -> torch.Tensor | None:
        """Their observed mask, same shape; None: every cell observed."""
        return self.split_windows(split).all().observed

    def split_windows(self, split: str, stride: int = 1) -> WindowIndex:
        """Every `stride`-th window of `split` (lazily: `take` or `all` gathers them)."""
        starts, floors = self.target_starts(split)
        model = self.config.model
        index = WindowIndex(
            self.scaled,
            self.observed,
            torch.from_numpy(starts),
            torch.from_numpy(floors),
            model.context_len,
            model.horizon,
            self.layout,
        )
        return index.every(stride) if stride > 1 else index


def panel_min_history(split: str, context_len: int, horizon: int) -> int:
    return min(context_len, horizon) if split == "train" else 1


def prepare(
    cfg: Config,
    scaler: Scaler | None = None,
    columns: tuple[str, ...] = (),
    freq: str = "",
    series: tuple[tuple[str, ...], ...] | None = None,
) -> Prepared:
    """Read cfg.data.path, choose automatic model sizes, split each series and scale it.

    Training passes no scaler (one is fit on each series' observed training cells); evaluate/check pass
    the run's scaler, columns, frequency and series, and the CSV must match them.
    """
    if not cfg.data.path:
        raise DataError("no CSV given; pass a CSV path or set data.path in the config")
    data_cfg = cfg.data if not columns else dataclasses.replace(cfg.data, targets=columns)
    expected_ids = None if series is None else data_cfg.id_cols  # a run's: exactly its id columns, or none
    frame = read_series(data_cfg.path, data_cfg, expected_freq=freq, expected_ids=expected_ids)
    if series is not None and frame.keys != series:
        raise DataError(f"{data_cfg.path} {_series_difference(frame, series)}; use the CSV the model was trained on")
    if scaler is None and cfg.data.id_cols and frame.n_ids == 1 and frame.n_rows > 1:
        raise DataError(
            f"id column{'s' * (len(frame.id_cols) > 1)} {', '.join(map(repr, frame.id_cols))} hold one value "
            f"({'/'.join(frame.keys[0])!r}) on every row, so {'they name' if len(frame.id_cols) > 1 else 'it names'} "
            "no series; drop --id-col for a single series, or name the column that identifies each series"
        )
    notes = frame.notes
    panel = bool(frame.id_cols)
    horizon = cfg.model.horizon
    if not cfg.model.resolved:  # the split's room is checked for the horizon alone, then for the chosen context
        train_rows = split_borders(cfg.data, frame, 0, horizon, min_history=1).train_end
        cfg, note = resolve_auto(cfg, int(train_rows.max()), season_length(frame.freq), frame.freq)
        notes += (note,)
    context_len = cfg.model.context_len
    train_history = panel_min_history("train", context_len, horizon) if panel else context_len
    borders = split_borders(cfg.data, frame, context_len, horizon, min_history=train_history)
    if panel:
        notes += (_split_note(cfg, frame, borders, train_history),)
    if scaler is None:
        scaler, notes = fit_scaler(frame, borders, notes, scale_season(cfg, frame.freq))
    calendar = calendar_names(frame.freq, cfg.data.calendar, cfg.model.cycle)
    layout = Layout(frame.columns, cfg.data.past_covs, cfg.data.future_covs, calendar)
    scaled = _scale(frame, scaler)  # (n_rows, C + n_covariates)
    observed = frame.input_observed()
    if not cfg.data.fill:
        observed[:, : len(frame.columns)] &= frame.observed
    if calendar:
        features = calendar_features(frame.timestamps, frame.freq, cfg.data.calendar, cfg.model.cycle)
        scaled = np.concatenate([scaled, features], axis=1)
        observed = np.concatenate([observed, np.ones((frame.n_rows, len(calendar)), dtype=bool)], axis=1)
    return Prepared(
        config=cfg,
        frame=frame,
        borders=borders,
        scaler=scaler,
        scaled=torch.from_numpy(scaled),
        observed=None if observed.all() else torch.from_numpy(observed),
        fingerprint=data_fingerprint(frame),
        notes=notes,
        layout=layout,
    )


def scale_season(cfg: Config, freq: str) -> int:
    """The season the scaler measures change over (data.scale=seasonal), else 0: the std."""
    return max(season_length(freq), 1) if cfg.data.scale == "seasonal" else 0


def fit_scaler(
    frame: SeriesFrame, borders: SplitBorders, notes: tuple[str, ...] = (), season: int = 0
) -> tuple[Scaler, tuple[str, ...]]:
    """The train-only scaler of the targets and covariates: a wide file's columns, or each series of a
    panel on its own training rows."""
    inputs = frame.inputs()  # (n_rows, C + n_covariates), NaN where missing
    if not frame.id_cols:
        train_end = int(borders.train_end[0])
        train_observed = frame.observed[:train_end].any(axis=0)
        if not train_observed.all():
            name = frame.columns[int(np.flatnonzero(~train_observed)[0])]
            raise DataError(
                f"column {name!r} has no value in the {train_end} training rows, so it cannot be "
                "scaled or learned; give it training data or choose other --target columns"
            )
        return Scaler.fit(inputs[:train_end], season), notes
    scaler, borrowed = Scaler.fit_series(inputs, frame.bounds, borders.train_end, season)
    if borrowed.any():
        notes += (
            f"{int(borrowed.sum())} series have no training value in some column ({_first_names(frame, borrowed)}); "
            "they are scaled with the statistics of all series' training rows",
        )
    return scaler, notes


def _split_note(cfg: Config, frame: SeriesFrame, borders: SplitBorders, train_history: int) -> str:
    """How each series was split, and which series have no training window (skipped from training)."""
    horizon = cfg.model.horizon
    if cfg.data.split_borders:
        rule = f"at data.split_borders {list(cfg.data.split_borders)}"
    elif cfg.data.split_ratios:
        rule = f"by data.split_ratios {'/'.join(f'{r:g}' for r in cfg.data.split_ratios)}"
    else:
        rule = f"its last {horizon} steps are test, the {horizon} before them validation, the rest training"
    line = f"{frame.n_ids} series, split one by one ({rule}); statistics from training steps only"
    no_window = window_counts("train", borders, train_history, horizon) == 0
    if no_window.any():
        line += (
            f"; {int(no_window.sum())} series are too short for a training window of {horizon} steps after "
            f"{train_history} of history and are skipped from training (still forecast): "
            f"{_first_names(frame, no_window)}"
        )
    return line


def _series_difference(frame: SeriesFrame, series: tuple[tuple[str, ...], ...]) -> str:
    """How the file's series differ from the run's, in a few words."""
    have, want = set(frame.keys), set(series)
    if want - have:
        missing = sorted(want - have)
        return f"lacks {len(missing)} of the run's {len(series)} series (first {'/'.join(missing[0])!r})"
    if have - want:
        extra = sorted(have - want)
        return f"has {len(extra)} series the run was not trained on (first {'/'.join(extra[0])!r})"
    return "holds the run's series in another order"


def _first_names(frame: SeriesFrame, mask: np.ndarray, n: int = 5) -> str:
    picked = [frame.names[i] for i in np.flatnonzero(mask)[:n]]
    more = int(mask.sum()) - len(picked)
    return ", ".join(repr(name) for name in picked) + (f" and {more} more" if more > 0 else "")


def data_fingerprint(frame: SeriesFrame) -> dict[str, str | int]:
    """Rows, first and last timestamp, and a sha256 of the timestamps and values a model is trained on."""
    digest = hashlib.sha256(frame.timestamps.asi8.tobytes())
    digest.update(np.ascontiguousarray(frame.values).tobytes())
    if frame.covariates is not None:
        digest.update(np.ascontiguousarray(frame.covariates).tobytes())
        digest.update("\0".join(frame.covariate_names).encode())
    digest.update("\0".join(frame.columns).encode())
    if frame.id_cols:
        digest.update(frame.bounds.tobytes())
        digest.update("\0".join(frame.names).encode())
    return {
        "rows": frame.n_rows,
        "first": str(frame.timestamps[0]),
        "last": str(frame.timestamps[-1]),
        "sha256": digest.hexdigest(),
    }


MAX_STANDARD_DEVIATIONS = 1e6


def _scale(frame: SeriesFrame, scaler: Scaler) -> np.ndarray:
    """Standardised float32 values; a value absurdly far from the training rows is a data error."""
    ids = frame.id_of_rows() if frame.n_ids > 1 else 0
    mean, std = scaler.mean[ids], scaler.std[ids]  # (n_rows or 1, n_inputs)
    inputs = frame.inputs()
    scaled = (inputs.astype(np.float64) - mean) / std
    far = ~(np.abs(scaled) <= MAX_STANDARD_DEVIATIONS) & ~np.isnan(scaled)  # NaN: an unobserved cell
    if far.any():
        row, j = (int(i[0]) for i in np.nonzero(far))
        i = int(np.searchsorted(frame.bounds, row, side="right")) - 1
        where = f" of series {frame.names[i]!r}" if frame.id_cols else ""
        raise DataError(
            f"column {frame.input_names[j]!r}{where} is {inputs[row, j]:g} at {frame.timestamps[row]}, over "
            f"{MAX_STANDARD_DEVIATIONS:g} standard deviations from the training rows (mean {scaler.mean[i, j]:g}, "
            f"std {scaler.std[i, j]:g}); fix the value or rescale the column"
        )
    return np.nan_to_num(scaled, nan=0.0).astype(np.float32)
