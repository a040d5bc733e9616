"""The settings left automatic, chosen from the data's training and validation rows before training.

- model.context_len and model.patch_len: from the training rows and the frequency (`config.resolve_auto`); a
  small panel of data below a day (one whose epochs are short, as for model.members below) may read past 336
  steps in whole weeks, up to 720, where its longest series' training rows allow. That won validation on the
  electricity markets and lost it on ETTh1's columns as a panel and on M4 Hourly (benchmarks/NOTES.md,
  session 24);
- train.epochs: the most epochs, from the training windows (`config.auto_epochs`; patience ends training);
- model.dropout: LONG_EPOCH_DROPOUT where an epoch is long (at least LONG_EPOCH_STEPS optimiser steps, a large
  panel, which then also trains at most LONG_EPOCHS epochs), AUTO_DROPOUT otherwise. On M4 Hourly it lowered
  the validation MSE and sMAPE, tied MASE, and took about a third of the optimiser steps; ETTh1 lost with less
  dropout (benchmarks/NOTES.md, session 25);
- train.lr: LONG_EPOCH_LR with the long epochs' automatic epochs and dropout (their LONG_EPOCHS epochs at twice
  the usual rate: on M4 Hourly it lowered the epoch score on two seeds in two thirds of the time,
  benchmarks/NOTES.md, session 37), AUTO_LR otherwise;
- model.members: AUTO_MEMBERS models averaged where an epoch is short (fewer than AUTO_MIN_STEPS optimiser steps
  in AUTO_MIN_EPOCHS epochs, so a member trains about AUTO_MIN_STEPS steps), one otherwise; one under the recipe
  search (`train.time_limit`), which adds members itself. The mean of several seeds has a lower expected squared
  error than one seed, and it won validation in the three electricity runs (benchmarks/NOTES.md, session 22).
  A panel of data below a day whose epochs are long gets two members instead, one reading the context and one its
  last half where that holds a week (model.member_contexts, `half_context`): on M4 Hourly it lowered the validation
  sMAPE and MASE (benchmarks/NOTES.md, session 27);
- data.calendar: calendar features are used where a cheap probe shows the calendar explains what the season
  does not (`calendar_gain`), measured on validation rows;
- model.cycle: a learned weekly cycle (168 for hourly data) for a panel of data below a day whose series' training
  rows span two weeks or more (it won validation on M4 Hourly and on the four electricity markets,
  benchmarks/NOTES.md), none otherwise;
- train.loss: mae for a panel (long format with many series, judged by MAE, MASE and sMAPE, where each
  series should weigh by its own absolute errors), mse for a wide file or a single series (judged by MSE);
- train.candidates: the built-in candidates that apply, and ETS and Theta (`tsformer.classical`) where fitting
  them to every validation and test window and column (each is fit per window) is estimated to take at most
  CLASSICAL_BUDGET_S seconds of one core (under train.time_limit, at most a quarter of it): a short single
  series, a small wide file, a panel of a few hundred short yearly series; not ETTh1, M4 Hourly or the
  electricity markets, whose windows number thousands. Croston and TSB (`tsformer.intermittent`) are named in the
  note where demand is intermittent (`intermittent_share`: every target column floored at zero by data.floor, and
  some series' training values zero at least INTERMITTENT_ZERO_SHARE of the time), not added: on seven
  intermittent data sets they moved no choice or lost the rule's nested validation score (benchmarks/NOTES.md,
  session 51).

Only rows before the end of validation are read: the test split never chooses a setting. The resolved
config (every value concrete) is what a run stores.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import numpy as np

from tsformer.candidates import (
    BUILT_IN,
    CLASSICAL,
    FITTED,
    INTERMITTENT,
    candidate_names,
    season_for,
    steps_per_week,
)
from tsformer.classical import fit_seconds
from tsformer.config import (
    AUTO_DROPOUT,
    AUTO_LR,
    AUTO_MEMBERS,
    AUTO_MIN_EPOCHS,
    AUTO_MIN_STEPS,
    LONG_EPOCH_DROPOUT,
    LONG_EPOCH_LR,
    LONG_EPOCHS,
    Config,
    ModelConfig,
    auto_epochs,
    epoch_steps,
    long_epochs,
    resolve_auto,
)
from tsformer.data.calendar import calendar_features, calendar_names
from tsformer.data.loader import SeriesFrame
from tsformer.data.split import Scaler, SplitBorders, panel_min_history, split_borders, val_horizons, window_counts
from tsformer.data.timestamps import written_offset
from tsformer.metrics import season_length

# ets and theta are candidates by default where fitting them to every validation window (in train) and test window
# (in evaluate) and column is estimated to take at most this many seconds of one core (2.5 minutes on 2 cores)
CLASSICAL_BUDGET_S = 300.0
# under train.time_limit, at most this share of it (in one core's seconds, so at most half of it on two cores, and
# the estimate can be off by a factor of two): the recipe search needs the rest for the model
CLASSICAL_TIME_SHARE = 0.25
# demand is intermittent where at least this share of a series' training values are zero: Syntetos and Boylan's
# cut-off of 1.32 steps between demands on average, where Croston's methods start to beat smoothing the level
INTERMITTENT_ZERO_SHARE = 1 - 1 / 1.32
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
    cfg, borders = choice_split(cfg, frame)
    notes, chosen, flags = [], [], []
    fixed = frame.timestamps.tz is not None and not cfg.data.time_zone
    if fixed and not cfg.data.utc_offset:  # stored, so later files are read at it
        offset = written_offset(frame.timestamps[:1])
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, utc_offset=offset))
    panel = frame.is_panel
    if not cfg.model.resolved:
        rows, season = int(borders.train_end.max()), season_length(frame.freq)
        resolved, note = resolve_auto(cfg, rows, season, frame.freq)
        if panel and _short_epochs(resolved, _epoch_windows(resolved, frame, borders)):  # a small panel: whole weeks
            resolved, note = resolve_auto(cfg, rows, season, frame.freq, steps_per_week(frame.freq))
        cfg = resolved
        notes.append(note)
    if cfg.data.calendar is None:
        calendar, why = _choose_calendar(frame, borders)
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, calendar=calendar))
        if why:
            chosen.append(f"calendar features {'used' if calendar else 'left out'} ({why})")
            flags.append("data.calendar=true|false")
    if cfg.model.cycle is None:
        cycle, why = _choose_cycle(frame, borders, panel)
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, cycle=cycle))
        if why:
            chosen.append(f"model.cycle {cycle} ({why})")
            flags.append("model.cycle=N")
    if cfg.train.loss == "auto":
        loss = "mae" if panel else "mse"
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, loss=loss))
        what = "a panel" if panel else "one series" if frame.id_cols else "a wide file"
        chosen.append(f"train.loss {loss} ({what})")
        flags.append("train.loss=mse|mae|mase")
    n_windows = _epoch_windows(cfg, frame, borders)
    long_recipe = False  # the long epochs' higher rate goes with their automatic epochs and dropout
    if not cfg.train.epochs:
        cfg, note, long_recipe = _choose_epochs(cfg, n_windows)
        chosen.append(note)
        flags.append("train.epochs=N")
    if cfg.train.lr is None:
        lr = LONG_EPOCH_LR if long_recipe else AUTO_LR
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, lr=lr))
        if long_recipe:
            chosen.append(f"train.lr {lr:g} (long epochs: {LONG_EPOCHS} at twice the usual rate)")
            flags.append("train.lr=R")
    if cfg.model.dropout is None:
        long = long_epochs(n_windows, cfg.train.batch_size)
        dropout = LONG_EPOCH_DROPOUT if long else AUTO_DROPOUT
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dropout=dropout))
        if long:
            steps = epoch_steps(n_windows, cfg.train.batch_size)
            chosen.append(f"model.dropout {dropout} ({steps:,} steps an epoch: so many windows need less)")
            flags.append("model.dropout=P")
    if not cfg.model.members:
        model, why = _choose_members(cfg, n_windows, frame)
        cfg = dataclasses.replace(cfg, model=model)
        if why:
            chosen.append(f"model.members {model.members} ({why})")
            flags.extend(["model.members=N"] + ["model.member_contexts=L1,L2"] * bool(model.member_contexts))
    if chosen:
        notes.append(f"chosen from the data: {'; '.join(chosen)}; set with {', '.join('--set ' + f for f in flags)}")
    if not cfg.train.candidates:
        cfg, note = _choose_candidates(cfg, frame, borders)
        notes.append(note)
    else:
        cfg, note = _demand_candidates(cfg, frame, borders)
        notes.extend([note] if note else [])
    return cfg, tuple(notes)


def automatic(cfg: Config) -> Config:
    """`cfg` with every setting `resolve_from_data` chooses set back to automatic (the sizes, the calendar, the
    cycle, the loss, the epochs, the rate, the dropout, the members and the candidates); the split as it is."""
    model = dataclasses.replace(
        cfg.model, context_len=0, patch_len=0, cycle=None, dropout=None, members=0, member_contexts=()
    )
    train = dataclasses.replace(cfg.train, loss="auto", epochs=0, lr=None, candidates=())
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, calendar=None), model=model, train=train)


def choice_split(cfg: Config, frame: SeriesFrame) -> tuple[Config, SplitBorders]:
    """The split the choices are made on: the config with an automatic data.val_horizons chosen, and the
    borders (before context_len is chosen: every window needs one step of history)."""
    if cfg.data.val_horizons is None and _default_panel_split(cfg, frame):
        k = val_horizons(cfg.data, frame.lengths, cfg.model.horizon)
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, val_horizons=k))  # `prepare` says it
    # a given context_len is checked for room here as training will check it (0: automatic, chosen to fit)
    return cfg, split_borders(cfg.data, frame, cfg.model.context_len, cfg.model.horizon, min_history=1)


def _epoch_windows(cfg: Config, frame: SeriesFrame, borders: SplitBorders) -> int:
    """The windows an epoch trains on: every training window (every train_stride-th), or train.epoch_windows."""
    model, tc = cfg.model, cfg.train
    history = panel_min_history("train", model.context_len, model.horizon) if frame.id_cols else model.context_len
    counts = window_counts("train", borders, history, model.horizon)
    n_windows = -(-int(counts.sum()) // tc.train_stride)
    return min(n_windows, tc.epoch_windows) if tc.epoch_windows else n_windows


def _choose_epochs(cfg: Config, n_windows: int) -> tuple[Config, str, bool]:
    """train.epochs from the windows an epoch trains on (`config.auto_epochs`): the most epochs, patience ending
    it; and whether they are the long epochs' recipe (LONG_EPOCHS, which train at LONG_EPOCH_LR)."""
    tc = cfg.train
    light_dropout = cfg.model.dropout is None  # the long epochs' cap goes with their automatic dropout
    epochs = auto_epochs(n_windows, tc.batch_size, light_dropout)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(tc, epochs=epochs))
    each = "training windows" if not tc.epoch_windows else "training windows an epoch, train.epoch_windows"
    long = light_dropout and long_epochs(n_windows, tc.batch_size)
    why = f"{n_windows:,} {each}{', long epochs' * long}; patience {tc.patience} ends it earlier"
    return cfg, f"at most {epochs} epochs ({why})", long


def _choose_members(cfg: Config, n_windows: int, frame: SeriesFrame) -> tuple[ModelConfig, str]:
    """model.members (and model.member_contexts) and why ("" for one model): as many as member_contexts gives;
    AUTO_MEMBERS where AUTO_MIN_EPOCHS epochs of `n_windows` take fewer than AUTO_MIN_STEPS steps; for a panel
    of data below a day whose epochs are long, a member at the context and one at half of it where that holds
    a week (`half_context`); else one (and one under the recipe search, which chooses its members)."""
    model = cfg.model
    if model.member_contexts:
        return dataclasses.replace(model, members=len(model.member_contexts)), ""
    if cfg.train.time_limit:
        return dataclasses.replace(model, members=1), ""
    if _short_epochs(cfg, n_windows):
        steps_per_epoch = epoch_steps(n_windows, cfg.train.batch_size)
        why = (
            f"the mean of {AUTO_MEMBERS} models from their own initial weights, as an epoch of {steps_per_epoch} "
            f"step{'s' * (steps_per_epoch != 1)} is short"
        )
        return dataclasses.replace(model, members=AUTO_MEMBERS), why
    long = frame.is_panel and long_epochs(n_windows, cfg.train.batch_size)
    half = half_context(model, frame.freq) if long else 0
    if not half:
        return dataclasses.replace(model, members=1), ""
    contexts = (model.context_len, half)
    why = f"the mean of models reading the last {contexts[0]} and {half} steps, as an epoch is long"
    return dataclasses.replace(model, members=2, member_contexts=contexts), why


def half_context(model: ModelConfig, freq: str) -> int:
    """The second member's context for data below a day: half the context in whole patches, where that still
    holds a week (as measured: M4 Hourly's 168 of 336); 0 otherwise. Beside the context it averaged M4 Hourly's
    forecasts to a lower validation MASE and MSE than two members of one context, in three quarters of their
    training time (benchmarks/NOTES.md)."""
    week = steps_per_week(freq)
    half = model.context_len // 2 // model.patch_len * model.patch_len
    return half if week and half >= week else 0


def _short_epochs(cfg: Config, n_windows: int) -> bool:
    """Whether AUTO_MIN_EPOCHS epochs of `n_windows` take fewer than AUTO_MIN_STEPS optimiser steps."""
    return epoch_steps(n_windows, cfg.train.batch_size) * AUTO_MIN_EPOCHS < AUTO_MIN_STEPS


def _choose_candidates(cfg: Config, frame: SeriesFrame, borders: SplitBorders) -> tuple[Config, str]:
    """train.candidates: the built-in ones that apply and the linear one where the model has a context skip and no
    quantile head, with ets and theta where their fits to every validation and test window and column are
    estimated (`classical_seconds`) to take at most CLASSICAL_BUDGET_S, or under train.time_limit at most
    CLASSICAL_TIME_SHARE of it where that is less."""
    model = cfg.model
    fits, seconds = classical_seconds(cfg, frame, borders)
    linear = model.context_skip and not cfg.train.quantiles  # a model with a skip and a point forecast has one
    built_in = candidate_names(frame.freq, model.context_len, (*BUILT_IN, *FITTED), linear)
    cost = f"{fits:,} validation and test windows x columns, about {seconds:,.0f} s of one core"
    budget, limit = CLASSICAL_BUDGET_S, ""
    if cfg.train.time_limit and CLASSICAL_TIME_SHARE * cfg.train.time_limit < budget:
        budget, limit = CLASSICAL_TIME_SHARE * cfg.train.time_limit, ", a quarter of --time-limit"
    if seconds <= budget:
        names = (*built_in, *CLASSICAL)
        note = (
            f"candidates: ETS and Theta (statsmodels, fit to each window) beside the built-in ones: {cost} "
            f"(up to {budget:.0f} s{limit}); set with --candidates"
        )
    else:
        names = built_in
        note = (
            f"candidates: ETS and Theta left out, as they are fit to each window: {cost} (up to "
            f"{budget:.0f} s{limit}); --candidates {','.join((*built_in, *CLASSICAL))} asks for them"
        )
    floored, zero_share = intermittent_share(cfg, frame, borders)
    if floored.all() and zero_share >= INTERMITTENT_ZERO_SHARE:  # named, not added: they won no validation yet
        note += (
            f"; demand is intermittent (up to {zero_share:.0%} of a series' training values zero): "
            f"--candidates {','.join((*names, *INTERMITTENT))} adds Croston and TSB"
        )
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, candidates=names)), note


def intermittent_share(cfg: Config, frame: SeriesFrame, borders: SplitBorders) -> tuple[np.ndarray, float]:
    """(n_columns,) bool: the target columns whose forecasts data.floor floors at zero for every series (`_floored`);
    and the largest share of zero values among one series' observed training values in a floored column (0 where
    none is floored)."""
    floored = _floored(cfg, frame, _training_scaler(frame, borders))
    shares = np.zeros((frame.n_ids, len(frame.columns)))
    for i, (start, end) in enumerate(zip(frame.bounds[:-1], borders.train_end, strict=True)):
        rows = slice(int(start), int(start) + int(end))
        seen = frame.observed[rows]  # (rows, n_columns)
        shares[i] = (seen & (frame.values[rows] == 0)).sum(axis=0) / np.maximum(seen.sum(axis=0), 1)
    return floored, float(shares[:, floored].max(initial=0.0))


def _training_scaler(frame: SeriesFrame, borders: SplitBorders) -> Scaler:
    """The targets' statistics on each series' training rows, as training fits them (`prepare.fit_scaler`)."""
    return Scaler.fit_series(frame.values, frame.bounds, borders.train_end)[0]


def _floored(cfg: Config, frame: SeriesFrame, scaler: Scaler) -> np.ndarray:
    """(n_columns,) bool: the target columns whose forecasts data.floor floors at zero for every series, decided by
    `Scaler.floors` as a trained predictor decides it (a panel's column for every series or none)."""
    columns = scaler.bounded_columns() if frame.id_cols else None
    return np.isfinite(scaler.floors(cfg.data.floor, columns)).all(axis=0)


def _demand_candidates(cfg: Config, frame: SeriesFrame, borders: SplitBorders) -> tuple[Config, str]:
    """train.candidates without Croston and TSB where a target column has no floor at zero to count demand from
    (they would repeat its last value), and a note saying so ("" when nothing was left out). A note, not an
    error, as elsewhere for candidates that do not apply: a refit backtest's early fold may lack the zeros that
    the whole run had."""
    asked = tuple(name for name in cfg.train.candidates if name in INTERMITTENT)
    if not asked:
        return cfg, ""
    scaler = _training_scaler(frame, borders)
    floored = _floored(cfg, frame, scaler)
    if floored.all():
        return cfg, ""
    j = int(np.argmin(floored))
    if cfg.data.floor == "none":
        why = "data.floor is none"
    else:
        lowest = np.fmin.reduce(scaler.lowest[:, j])  # over every series; NaN where none has a training value
        why = f"its training values go down to {lowest:g}" if lowest < 0 else "its training values never reach zero"
    kept = tuple(name for name in cfg.train.candidates if name not in INTERMITTENT)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, candidates=kept))
    return cfg, (
        f"candidates: {' and '.join(asked)} left out, as column {frame.columns[j]!r} has no floor at zero to count "
        f"demand from ({why}); if it cannot go below zero, train with --set data.floor=zero"
    )


def classical_seconds(cfg: Config, frame: SeriesFrame, borders: SplitBorders) -> tuple[int, float]:
    """The fits ETS and Theta would make, one per validation and test window and target column, and their
    estimated seconds on one core (`fit_seconds` at the run's season and context). The test windows are counted
    from the split's borders; no test value is read."""
    model = cfg.model
    history = 1 if frame.id_cols else model.context_len
    windows = sum(int(window_counts(split, borders, history, model.horizon).sum()) for split in ("val", "test"))
    fits = windows * len(frame.columns)
    season = season_for(frame.freq, model.context_len)
    return fits, fits * fit_seconds(CLASSICAL, season, model.context_len)


def _default_panel_split(cfg: Config, frame: SeriesFrame) -> bool:
    """Whether the split is long format's default (test and validation counted back from each series' end)."""
    return frame.is_panel and not cfg.data.split_borders and not cfg.data.split_ratios


def _choose_cycle(frame: SeriesFrame, borders: SplitBorders, panel: bool) -> tuple[int, str]:
    """The learned cycle's period, and why ("" when there is nothing to choose: a wide file, a single series, data
    of a day or longer): the week for a panel whose median series holds two weeks of training rows."""
    week = steps_per_week(frame.freq)
    if not panel or not week:
        return 0, ""
    median_rows = int(np.median(borders.train_end))
    if median_rows < 2 * week:
        return 0, f"the median series has {median_rows} training rows, under the two weeks ({2 * week}) it needs"
    return week, "a weekly cycle for a panel of data below a day"


def _choose_calendar(frame: SeriesFrame, borders: SplitBorders) -> tuple[bool, str]:
    """Whether to use calendar features, and why ("" when the frequency has none: nothing to choose)."""
    if not calendar_names(frame.freq):
        return False, ""
    gain = calendar_gain(frame, borders)
    if gain is None:
        return False, "no validation rows, or too few training rows, to measure them on"
    return gain.helps, (
        f"with them a linear probe's validation error moves {100 * (gain.ratio - 1):+.1f} % over {gain.val_rows} "
        f"rows; used from -{100 * CALENDAR_MIN_GAIN:g} %"
    )


def calendar_gain(frame: SeriesFrame, borders: SplitBorders) -> CalendarGain | None:
    """How much the calendar explains beyond the season, on validation; None when there is nothing to fit
    or score (no series with more than a season of training rows, or no observed validation cell).

    Each series' one-season change r(t) = v(t) - v(t - season), in its training standard deviations, is fit
    by least squares on the calendar features (and an intercept) over the training rows of every series and
    column pooled, then scored on the validation rows, against the intercept alone. Unobserved cells are
    left out. Reads only rows before each series' validation end. The fit adds up the normal equations
    series by series and column by column, so its memory does not grow with the number of columns.
    """
    season = season_length(frame.freq)
    features = calendar_features(frame.timestamps, frame.freq).astype(np.float64)  # (n_rows, F)
    width = features.shape[1] + 1  # the intercept, then the features
    gram, moment, n_fit = np.zeros((width, width)), np.zeros(width), 0  # X'X, X'r over the training rows
    scored = []  # per series and column: the validation design (n, 1 + F) and changes (n,)
    for i in range(frame.n_ids):
        rows = frame.rows_of(i)
        train_end, val_end = int(borders.train_end[i]), int(borders.val_end[i])
        if train_end <= season + 1:
            continue
        values = frame.values[rows][:val_end].astype(np.float64)  # (val_end, C)
        observed = frame.observed[rows][:val_end]
        with warnings.catch_warnings():  # a column with no observed training cell: NaN, left out below
            warnings.simplefilter("ignore", RuntimeWarning)
            scale = np.nanstd(np.where(observed[:train_end], values[:train_end], np.nan), axis=0)
        diff = (values[season:] - values[:-season]) / np.where(scale > 0, scale, np.nan)  # (val_end - season, C)
        diff[~(observed[season:] & observed[:-season])] = np.nan
        design = np.column_stack([np.ones(val_end - season), features[rows][season:val_end]])
        cut = train_end - season  # changes before it are training rows', from it on validation rows'
        for column in range(diff.shape[1]):
            keep = np.isfinite(diff[:, column])
            fit = keep.copy()
            fit[cut:] = False
            x, r = design[fit], diff[fit, column]
            gram += x.T @ x
            moment += x.T @ r
            n_fit += len(r)
            keep[:cut] = False
            if keep.any():
                scored.append((design[keep], diff[keep, column]))
    if n_fit <= width or not scored:
        return None
    weights = np.linalg.lstsq(gram, moment, rcond=None)[0]
    mean = moment[0] / n_fit  # the intercept alone: the training changes' mean
    with_calendar = sum(float(np.sum((r - x @ weights) ** 2)) for x, r in scored)
    without = sum(float(np.sum((r - mean) ** 2)) for _, r in scored)
    n_val = sum(len(r) for _, r in scored)
    return CalendarGain(with_calendar / n_val, without / n_val, n_fit, n_val)
