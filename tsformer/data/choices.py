"""The settings left automatic, chosen from the data's training and validation rows before training.

- model.context_len and model.patch_len: from the training rows and the frequency (`config.resolve_auto`);
- data.calendar: calendar features are used where a cheap probe shows the calendar explains what the season
  does not (`calendar_gain`), measured on validation rows;
- train.loss: mae for a panel (long format: many series, judged by MAE, MASE and sMAPE, where each series
  should weigh by its own absolute errors), mse for a wide file (one clock, judged by MSE).

Only rows before the end of validation are read: the test split never chooses a setting. The resolved
config (every value concrete) is what a run stores.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tsformer.config import Config, resolve_auto
from tsformer.data.calendar import calendar_features, calendar_names
from tsformer.data.loader import SeriesFrame
from tsformer.data.split import SplitBorders, split_borders
from tsformer.metrics import season_length

CALENDAR_MIN_GAIN = 0.05  # the calendar is used when it cuts the probe's validation MSE by at least this share


@dataclass(frozen=True)
class CalendarGain:
    """The calendar probe's validation MSE with and without calendar features, and the rows it rests on."""

    with_calendar: float
    without: float
    train_rows: int
    val_rows: int

    @property
    def ratio(self) -> float:
        return self.with_calendar / self.without if self.without > 0 else 1.0

    @property
    def helps(self) -> bool:
        return self.ratio <= 1 - CALENDAR_MIN_GAIN


def resolve_from_data(cfg: Config, frame: SeriesFrame) -> tuple[Config, tuple[str, ...]]:
    """The config with every automatic setting chosen from `frame`, and a line for the sizes and one for the
    other choices (none when nothing was automatic)."""
    # a given context_len is checked for room here as training will check it (0: automatic, chosen to fit)
    borders = split_borders(cfg.data, frame, cfg.model.context_len, cfg.model.horizon, min_history=1)
    notes, chosen, flags = [], [], []
    if not cfg.model.resolved:
        cfg, note = resolve_auto(cfg, int(borders.train_end.max()), season_length(frame.freq), frame.freq)
        notes.append(note)
    if cfg.data.calendar is None:
        calendar, why = _choose_calendar(frame, borders)
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, calendar=calendar))
        if why:
            chosen.append(f"calendar features {'used' if calendar else 'left out'} ({why})")
            flags.append("data.calendar=true|false")
    if cfg.train.loss == "auto":
        loss = "mae" if frame.id_cols else "mse"
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, loss=loss))
        chosen.append(f"train.loss {loss} ({'a panel' if frame.id_cols else 'a wide file'})")
        flags.append("train.loss=mse|mae")
    if chosen:
        notes.append(f"chosen from the data: {'; '.join(chosen)}; set with {', '.join('--set ' + f for f in flags)}")
    return cfg, tuple(notes)


def _choose_calendar(frame: SeriesFrame, borders: SplitBorders) -> tuple[bool, str]:
    """Whether to use calendar features, and why ("" when the frequency has none: nothing to choose)."""
    if not calendar_names(frame.freq):
        return False, ""
    gain = calendar_gain(frame, borders)
    if gain is None:
        return False, "no observed validation rows to measure them on"
    return gain.helps, (
        f"with them a linear probe's validation error moves {100 * (gain.ratio - 1):+.1f} % over {gain.val_rows} "
        f"rows; used from -{100 * CALENDAR_MIN_GAIN:g} %"
    )


def calendar_gain(frame: SeriesFrame, borders: SplitBorders) -> CalendarGain | None:
    """How much the calendar explains beyond the season, on validation; None without validation rows.

    Each series' one-season change r(t) = v(t) - v(t - season), in its training standard deviations, is fit
    by least squares on the calendar features (and an intercept) over the training rows of every series and
    column pooled, then scored on the validation rows, against the intercept alone. Unobserved cells are
    left out. Reads only rows before each series' validation end.
    """
    season = season_length(frame.freq)
    features = calendar_features(frame.timestamps, frame.freq).astype(np.float64)  # (n_rows, F)
    design = {"train": [], "val": []}
    change = {"train": [], "val": []}
    for i in range(frame.n_ids):
        rows = frame.rows_of(i)
        train_end, val_end = int(borders.train_end[i]), int(borders.val_end[i])
        if train_end <= season + 1:
            continue
        values = frame.values[rows][:val_end].astype(np.float64)  # (val_end, C)
        observed = frame.observed[rows][:val_end]
        train = np.where(observed[:train_end], values[:train_end], np.nan)
        scale = np.nanstd(train, axis=0)
        diff = (values[season:] - values[:-season]) / np.where(scale > 0, scale, np.nan)  # (val_end - season, C)
        diff[~(observed[season:] & observed[:-season])] = np.nan
        cal = features[rows][season:val_end]
        for split, part in (("train", slice(0, train_end - season)), ("val", slice(train_end - season, None))):
            for column in range(diff.shape[1]):
                design[split].append(cal[part])
                change[split].append(diff[part, column])
    fit, score = (_stacked(design[s], change[s]) for s in ("train", "val"))
    if len(fit[1]) <= fit[0].shape[1] or not len(score[1]):
        return None
    weights, *_ = np.linalg.lstsq(fit[0], fit[1], rcond=None)
    with_calendar = float(np.mean((score[1] - score[0] @ weights) ** 2))
    without = float(np.mean((score[1] - fit[1].mean()) ** 2))
    return CalendarGain(with_calendar, without, len(fit[1]), len(score[1]))


def _stacked(design: list[np.ndarray], change: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The pooled rows with a finite change: (n, 1 + F) design with its intercept column, and (n,) changes."""
    if not change:
        return np.zeros((0, 1)), np.zeros(0)
    x, y = np.concatenate(design), np.concatenate(change)
    keep = np.isfinite(y)
    return np.column_stack([np.ones(int(keep.sum())), x[keep]]), y[keep]
