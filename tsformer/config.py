"""One typed, frozen config: data, model and training sections.

Loaded strictly from YAML (an unknown key is an error naming the valid ones), then overridden
by dotted `section.key=value` strings, then validated. `to_dict`/`config_from_dict` round-trip.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import numbers
import re
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from tsformer.errors import ConfigError, DataError
from tsformer.files import atomic_write_text

FILL_METHODS = ("", "ffill", "zero")
SCALES = ("std", "seasonal")
FLOORS = ("auto", "zero", "none")  # data.floor (`tsformer.data.split.Scaler.floors`)
TIME_UNITS = ("", "s", "ms", "us", "ns")  # data.time_unit: the unit of integer (Unix epoch) timestamps
DEFAULT_SPLIT_RATIOS = (0.7, 0.1, 0.2)  # train, validation, test of a wide file when data.split_ratios is ()
MAX_VAL_HORIZONS = 3  # the most horizons of validation an automatic data.val_horizons gives each series
MAX_SEED = 2**63 - 1  # torch.manual_seed takes a signed 64-bit integer
MAX_COUNT = 2**31 - 1  # sizes, strides and counts beyond this are typos, not settings
ATTENTIONS = ("auto", "fused", "explicit")  # model.attention (`tsformer.model.attention`)
PRECISIONS = ("auto", "float32", "bfloat16")  # model.precision (`tsformer.model.precision`)
# auto: mae for a panel, mse for a wide file (tsformer.data.choices); mase: mae in units of each window's naive MAE
LOSSES = ("auto", "mse", "mae", "mase")
INTERVAL_SCALES = ("seasonal", "fixed")  # train.interval_scale (tsformer.intervals)
# train.linear_rows: the rows the linear candidate fits on (`linear_candidate.ROWS`), or auto: chosen on validation
LINEAR_ROWS = ("auto", "every_token", "last_token")
# the ridges (relative to the Gram matrix's mean diagonal) an automatic train.linear_ridge is chosen among, on the
# training windows (`linear_candidate.choose_ridge`)
LINEAR_RIDGES = (1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0)
# keys no longer in the config: what to do instead (a stored run's are dropped when it is read: tsformer.checkpoint)
REMOVED_KEYS = {
    "train.interval_calibration": "the calibration model was removed: with the final fit (train.final_fit) predict "
    "forecasts from where its model's training ends, as validation does; drop the key",
    "train.least_squares_start": "the least-squares start is now the linear candidate, weighed per series and "
    "column beside the others: train.candidates without linear leaves it out; drop the key",
}
# train.candidates' names: the candidates of `tsformer.candidates`, defined here as this module loads no torch
CANDIDATE_NAMES = (
    "repeat_last",
    "seasonal_naive",
    "drift",
    "seasonal_drift",
    "weekly_naive",
    "weekly_drift",
    "linear",
    "ets",
    "theta",
    "croston",
    "tsb",
)
AUTO_MAX_CONTEXT = 336  # the longest automatic context_len: two weeks of hourly data, the ETTh1 setting
PANEL_MAX_CONTEXT = 720  # a small panel below a day may read past AUTO_MAX_CONTEXT in whole weeks, up to this
SEASON_MAX_CONTEXT = 1440  # a season past AUTO_MAX_CONTEXT (a day of minutes) is read whole where the data allow
SEARCH_MAX_CONTEXT = 720  # the longest context the recipe search (train.time_limit) tries: 30 days of hourly data
AUTO_MAX_PATCH = 24  # the longest automatic patch_len: a day of hourly data
AUTO_PATCH_NO_SEASON = 4  # the automatic patch_len for a frequency with no known season (yearly, 2-day, ...)
# an automatic train.epochs (0) caps training at the epochs that take AUTO_MIN_STEPS optimiser steps, at least
# AUTO_MIN_EPOCHS and at most AUTO_MAX_EPOCHS; patience ends it earlier once validation stops improving
AUTO_MIN_STEPS = 500
AUTO_MIN_EPOCHS = 10
AUTO_MAX_EPOCHS = 100
AUTO_MEMBERS = 3  # an automatic model.members where training is short (`data.choices`)
# a long epoch (at least LONG_EPOCH_STEPS optimiser steps: a large panel, M4 Hourly's 1,834) trains with dropout
# LONG_EPOCH_DROPOUT, as so many windows need less, and at most LONG_EPOCHS epochs at LONG_EPOCH_LR, as with them
# validation peaks by the last (benchmarks/NOTES.md, sessions 25 and 37); shorter epochs keep AUTO_DROPOUT and
# AUTO_LR, and a given dropout or epoch count the usual epochs and learning rate
LONG_EPOCH_STEPS = 1_000
LONG_EPOCHS = 3
LONG_EPOCH_LR = 2e-3
LONG_EPOCH_DROPOUT = 0.1
AUTO_DROPOUT = 0.3
AUTO_LR = 1e-3


def check_split(split: str) -> None:
    """Refuse a split evaluate does not score (here, where the command line checks it before torch loads)."""
    if split not in ("test", "val"):
        raise ConfigError(f"--split must be test or val, got {split!r}")


def _known_zone(name: str) -> bool:
    """Whether `name` is a time zone this machine's zone database knows."""
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return True


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _check_finite(section: Any, name: str) -> None:
    """Every float of a section is finite and every count fits MAX_COUNT (the seed has its own range)."""
    for f in fields(section):
        value = getattr(section, f.name)
        if isinstance(value, float):
            _require(math.isfinite(value), f"{name}.{f.name} must be a finite number, got {value}")
        elif isinstance(value, int) and not isinstance(value, bool) and f.name != "seed":
            _require(value <= MAX_COUNT, f"{name}.{f.name} must be at most {MAX_COUNT}, got {value}")


@dataclass(frozen=True)
class DataConfig:
    """Where the series come from and how they are split."""

    path: str = ""  # the CSV; stored absolute in a run's resolved config
    time_col: str = ""  # "" finds date/timestamp/time/... by name
    id_cols: tuple[str, ...] = ()  # long format: the columns naming each series; () finds unique_id/item_id/... by name
    targets: tuple[str, ...] = ()  # () forecasts every numeric column
    freq: str = ""  # pandas offset alias; "" infers it from the timestamps
    time_unit: str = ""  # integer timestamps' Unix epoch unit: s, ms, us or ns; "" reads it from their magnitude
    future_covs: tuple[str, ...] = ()  # known-future covariates: known up to the end of the forecast
    past_covs: tuple[str, ...] = ()  # past-only covariates: observed with the target, unknown ahead
    # static covariates, one value per series: columns of static_path (all but the ids when none are named),
    # or columns of the data that hold one value in each series
    static_covs: tuple[str, ...] = ()
    static_path: str = ""  # a CSV with one row per series: its id columns and static covariates
    # derive known-future calendar features (hour, weekday, ...) from the timestamps; None (auto): where they
    # help a probe on validation (tsformer.data.choices)
    calendar: bool | None = None
    sort: bool = False  # accept unsorted rows by sorting them on the time column
    dayfirst: bool = False  # read ambiguous dates such as 01/02/2024 as day/month
    # the UTC offset ("+01:00") that timestamps written with offsets are read at, calendar features included;
    # "" takes the first row's (a training row), and the run stores it, so every file it reads is read alike
    utc_offset: str = ""
    # an IANA time zone ("Europe/Berlin"): timestamps written with UTC offsets are read as its local times, each at
    # its own offset (daylight saving included), and forecasts are written so; "" reads them at one utc_offset
    time_zone: str = ""
    fill: str = ""  # "", ffill or zero: how NaN/inf cells are filled (never from later rows)
    # Each series' scale (from its training steps): std, or seasonal = the mean absolute change over one season
    # (MASE's denominator), which weighs smooth, regular series more in the loss
    scale: str = "std"
    # which target columns are never forecast below zero (point forecasts, quantiles, interval bounds, in the
    # validation windows that choose and calibrate as in what ships): auto, each column that reached zero in a
    # series' training rows and never went below (counts, sales); zero, every target column (values that cannot
    # go negative though they never reached zero: investment, prices of goods; an error if one is below zero);
    # none, no column
    floor: str = "auto"
    # train, validation, test shares of each series; () = DEFAULT_SPLIT_RATIOS for a wide file, and for
    # long format (many series) the last `horizon` steps of each series as test, `val_horizons` x horizon before
    # them as validation
    split_ratios: tuple[float, ...] = ()
    # long format's default split: validation steps per series in horizons, each series' stretch scored at every
    # origin in it; None (auto): up to MAX_VAL_HORIZONS while the median series keeps half its rows for training
    val_horizons: int | None = None
    # ends of train, val, test: row numbers within each series (negative: counted back from its end) or dates
    split_borders: tuple[int | str, ...] = ()

    def __post_init__(self) -> None:
        _require(
            self.fill != "interpolate",
            "data.fill=interpolate was removed: it read values after the forecast origin; use ffill or zero",
        )
        _require(self.fill in FILL_METHODS, f"data.fill must be one of {FILL_METHODS[1:]}, got {self.fill!r}")
        _require(self.scale in SCALES, f"data.scale must be one of {SCALES}, got {self.scale!r}")
        _require(self.floor in FLOORS, f"data.floor must be one of {', '.join(FLOORS)}, got {self.floor!r}")
        _require(
            self.calendar is None or isinstance(self.calendar, bool),
            f"data.calendar must be true, false or auto, got {self.calendar!r}",
        )
        _require(
            self.time_unit in TIME_UNITS,
            f"data.time_unit must be one of {', '.join(TIME_UNITS[1:])}, got {self.time_unit!r}",
        )
        _require(
            self.utc_offset == "" or re.fullmatch(r"[+-]\d\d:\d\d", self.utc_offset) is not None,
            f"data.utc_offset must be an offset such as +01:00 or -05:30, got {self.utc_offset!r}",
        )
        _require(
            not (self.utc_offset and self.time_zone),
            "data.utc_offset and data.time_zone both set: give the zone alone (its offsets change with daylight "
            "saving) or one fixed offset",
        )
        _require(
            self.time_zone == "" or _known_zone(self.time_zone),
            f"data.time_zone must be an IANA time zone such as Europe/Berlin or America/New_York, got "
            f"{self.time_zone!r}",
        )
        _check_finite(self, "data")
        _require(
            self.val_horizons is None or self.val_horizons >= 1,
            f"data.val_horizons must be at least 1 (or auto), got {self.val_horizons}",
        )
        _require(
            len(self.split_ratios) in (0, 3), "data.split_ratios needs three numbers (train, validation, test), or none"
        )
        _require(
            all(r > 0 for r in self.split_ratios) and sum(self.split_ratios) <= 1 + 1e-9,
            f"data.split_ratios must be positive and sum to at most 1, got {list(self.split_ratios)}",
        )
        _require(
            len(self.split_borders) in (0, 3),
            "data.split_borders needs three entries (ends of train, validation, test), or none",
        )


@dataclass(frozen=True)
class ModelConfig:
    """The causal Transformer's shape."""

    context_len: int = 0  # input steps the model sees; 0 = chosen from the data at train time (`resolve_auto`)
    horizon: int = 96  # steps forecast after the context
    patch_len: int = 0  # steps per token (1 = one per step; 24 = a day of hourly data); 0 = from the data
    d_model: int = 64
    n_heads: int = 4  # each head has d_model / n_heads dimensions
    n_layers: int = 2
    d_ff: int = 128  # feed-forward width
    # None = chosen from the data (`data.choices`): LONG_EPOCH_DROPOUT where an epoch is long, AUTO_DROPOUT
    # otherwise and for a model built from an unresolved config (`dropout_rate`)
    dropout: float | None = None
    channel_independent: bool = True  # each series its own sequence through shared weights
    stats_features: bool = True  # also feed each token its (causal, prefix) normalisation mean and log std
    # fused (scaled_dot_product_attention), explicit (the formula) or auto: the faster of the two for the device and
    # the number of tokens (`attention.fused_is_faster`)
    attention: str = "auto"
    # The head maps the states of the n_tokens tokens up to a token to its forecast; each state is
    # first reduced to this width (not the per-head width, which is d_model / n_heads).
    head_token_width: int = 16
    context_skip: bool = True  # add a linear map of the normalised context before each token to its forecast
    # A learned cycle of this many steps (24: hourly data's day), per target column, indexed by each step's
    # phase (from its timestamp, a known-future input): removed from the inputs, added back to the forecast
    # (CycleNet's residual cycle). 0 = none; None = chosen from the data (`data.choices`): the weekly cycle for a
    # panel of data below a day, none otherwise (a model built from an unresolved config has none)
    cycle: int | None = None
    transformer: bool = True  # False: the ablation without the Transformer (context skip and cycle alone)
    # forecast with the mean of this many models, each from its own initial weights; 0 = chosen from the data
    # (`data.choices`): AUTO_MEMBERS where an epoch is short (fewer than AUTO_MIN_STEPS steps in AUTO_MIN_EPOCHS
    # epochs), one otherwise and under the recipe search, which ensembles its own (a model built unresolved has one)
    members: int = 0
    # each member's context_len, longest first, when the members read different stretches of the context (each
    # its last steps of it; the longest is context_len); () = every member reads the whole context. Chosen from
    # the data with model.members (`data.choices`): the context and half of it where an epoch is long
    member_contexts: tuple[int, ...] = ()
    # the forward's matrix products in float32 or bfloat16 (torch.autocast; the loss, the optimiser and the
    # statistics stay float32); auto: bfloat16 where the device computes it natively (`resolve_precision`)
    precision: str = "auto"

    def __post_init__(self) -> None:
        _check_finite(self, "model")
        if self.member_contexts:
            _require(
                self.members in (0, len(self.member_contexts)),
                f"model.member_contexts gives {len(self.member_contexts)} contexts for model.members={self.members}",
            )
            _require(
                list(self.member_contexts) == sorted(self.member_contexts, reverse=True)
                and all(c >= 1 for c in self.member_contexts),
                f"model.member_contexts must be steps, longest first, got {list(self.member_contexts)}",
            )
            _require(
                self.context_len in (0, self.member_contexts[0]),
                f"model.member_contexts' longest ({self.member_contexts[0]}) must be model.context_len "
                f"({self.context_len}); set --context-len {self.member_contexts[0]}, or leave it automatic",
            )
            _require(
                self.patch_len <= self.member_contexts[-1],
                f"model.patch_len ({self.patch_len}) must not exceed the shortest of model.member_contexts "
                f"({self.member_contexts[-1]})",
            )
        for name in ("context_len", "patch_len", "members"):
            value = getattr(self, name)
            _require(value >= 0, f"model.{name} must be at least 1 (or 0 to choose it from the data), got {value}")
        for name in ("horizon", "d_model", "n_heads", "n_layers", "d_ff"):
            _require(getattr(self, name) >= 1, f"model.{name} must be at least 1, got {getattr(self, name)}")
        _require(
            self.d_model % self.n_heads == 0,
            f"model.n_heads ({self.n_heads}) must divide model.d_model ({self.d_model})",
        )
        context = self.context_len or AUTO_MAX_CONTEXT  # an automatic context: at most this (a panel's weeks aside)
        _require(
            self.patch_len <= context,
            f"model.patch_len ({self.patch_len}) must not exceed model.context_len "
            f"({self.context_len or f'automatic, at most {AUTO_MAX_CONTEXT}; set --context-len'})",
        )
        _require(self.dropout is None or 0 <= self.dropout < 1, f"model.dropout must be in [0, 1), got {self.dropout}")
        _require(
            self.cycle is None or self.cycle >= 0,
            f"model.cycle must be a number of steps >= 0 (0 = none), got {self.cycle}",
        )
        _require(
            self.transformer or self.context_skip or self.cycle,
            "model.transformer=false leaves nothing to forecast with; keep model.context_skip or a model.cycle",
        )
        _require(self.head_token_width >= 1, f"model.head_token_width must be at least 1, got {self.head_token_width}")
        _require(self.attention in ATTENTIONS, f"model.attention must be one of {ATTENTIONS}, got {self.attention!r}")
        _require(self.precision in PRECISIONS, f"model.precision must be one of {PRECISIONS}, got {self.precision!r}")

    @property
    def resolved(self) -> bool:
        """Whether context_len and patch_len are set (not 0 = chosen from the data by `resolve_auto`)."""
        return self.context_len > 0 and self.patch_len > 0

    @property
    def dropout_rate(self) -> float:
        """The dropout the model trains with: model.dropout, or AUTO_DROPOUT while it is still automatic."""
        return AUTO_DROPOUT if self.dropout is None else self.dropout

    @property
    def contexts(self) -> tuple[int, ...]:
        """Each member's context_len, longest first: member_contexts, or context_len for every member (one for an
        unresolved model.members)."""
        return self.member_contexts or (self.context_len,) * max(1, self.members)

    @property
    def n_tokens(self) -> int:
        """Tokens per context: the context is left-padded to a whole number of patches."""
        if not self.resolved:
            raise ConfigError(
                f"model.context_len ({self.context_len}) and model.patch_len ({self.patch_len}) must be chosen "
                "before a model is built: 0 means 'from the data', which `resolve_auto` does at train time"
            )
        return -(-self.context_len // self.patch_len)


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation, early stopping and reproducibility."""

    epochs: int = 0  # the most epochs; 0: from the training windows (`auto_epochs`), 10 to 100, or 3 long ones
    batch_size: int = 128
    # the peak learning rate; None = chosen from the data (`data.choices`): LONG_EPOCH_LR with the long epochs'
    # automatic recipe, AUTO_LR otherwise and for a model trained from an unresolved config (`learning_rate`)
    lr: float | None = None
    min_lr_ratio: float = 0.05  # the cosine schedule decays to lr * min_lr_ratio
    warmup_frac: float = 0.05  # share of all steps spent warming up linearly
    weight_decay: float = 0.05
    grad_clip: float = 1.0  # max gradient norm; 0 disables clipping
    patience: int = 3  # epochs without validation improvement before stopping
    loss: str = "auto"  # mse, mae, or auto: mae for a panel (long format), mse for a wide file
    all_positions: bool = True  # train every token to forecast the horizon after it
    train_stride: int = 1  # use every n-th training window (1 = all)
    # windows an epoch trains on, a new draw each epoch, uniform over series (each gives the same number, all of
    # its own when it has fewer; `WindowIndex.epoch_draw`); 0: every window
    epoch_windows: int = 0
    max_minutes: float = 0.0  # stop after this wall time (0 = no limit); breaks exact reproducibility
    # seconds for the whole of train, searching recipes on validation within them (`tsformer.search`): a longer
    # context, another loss, more members; 0 = no search, the one default recipe
    time_limit: float = 0.0
    seed: int = 0
    num_threads: int = 0  # torch CPU threads (0 = torch's default)
    device: str = "cpu"  # cpu, cuda or auto
    fallback: bool = True  # per column, ship the candidates or their weighted mean with the model where validation says
    # how the fallback averages each forecaster's validation errors per series and column (on standardised values):
    # mse, or mae (MASE up to each series' constant); mse won on M4 Hourly's validation (benchmarks/NOTES.md)
    selection_metric: str = "mse"
    # the candidates the fallback scores (`tsformer.candidates.CANDIDATES`); () = chosen from the data: every
    # built-in one that applies, the linear candidate where the model has one, and ets and theta where their fits
    # cost little (`choices`); croston and tsb (intermittent demand) only when named
    candidates: tuple[str, ...] = ()
    # the rows the linear candidate fits on: every_token (each token's window, zero-padded, as the loss trains the
    # model), last_token (the whole context, as a forecast reads it), or auto: whichever fit scores lower on
    # validation (the run's saved config says which; `calibration.fit_linear`)
    linear_rows: str = "auto"
    # the linear candidate's ridge, relative to its Gram matrix's mean diagonal; None: chosen among LINEAR_RIDGES
    # by a fit of each series' earlier training windows forecasting its last fifth (a prior that short series
    # need, a tie-breaker where windows are many)
    linear_ridge: float | None = None
    intervals: tuple[float, ...] = (0.8, 0.95)  # conformal interval levels, calibrated on validation windows
    interval_scale: str = "seasonal"  # seasonal: each interval scales with its context's seasonal change; fixed
    quantiles: tuple[float, ...] = ()  # also forecast these quantiles (pinball loss), e.g. (0.1, 0.5, 0.9)
    # after every choice is made on the held-out model, train the final model on every row with its recipe
    # (its optimiser steps up to the best epoch); predict forecasts with it (`tsformer.final`)
    final_fit: bool = True

    def __post_init__(self) -> None:
        _check_finite(self, "train")
        _require(
            all(0 < level < 1 for level in self.intervals) and len(set(self.intervals)) == len(self.intervals),
            f"train.intervals must be distinct levels in (0, 1), got {list(self.intervals)}",
        )
        _require(
            self.interval_scale in INTERVAL_SCALES,
            f"train.interval_scale must be one of {', '.join(INTERVAL_SCALES)}, got {self.interval_scale!r}",
        )
        _require(
            all(0 < q < 1 for q in self.quantiles) and len(set(self.quantiles)) == len(self.quantiles),
            f"train.quantiles must be distinct levels in (0, 1), got {list(self.quantiles)}",
        )
        _require(self.epochs >= 0, f"train.epochs must be at least 1 (or 0: from the data), got {self.epochs}")
        _require(
            self.epoch_windows >= 0, f"train.epoch_windows must be >= 0 (0: every window), got {self.epoch_windows}"
        )
        for name in ("batch_size", "patience", "train_stride"):
            _require(getattr(self, name) >= 1, f"train.{name} must be at least 1, got {getattr(self, name)}")
        _require(self.lr is None or self.lr > 0, f"train.lr must be positive, got {self.lr}")
        _require(0 <= self.seed <= MAX_SEED, f"train.seed must be in 0..{MAX_SEED}, got {self.seed}")
        _require(0 <= self.min_lr_ratio <= 1, f"train.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        _require(0 <= self.warmup_frac < 1, f"train.warmup_frac must be in [0, 1), got {self.warmup_frac}")
        _require(self.weight_decay >= 0, f"train.weight_decay must be >= 0, got {self.weight_decay}")
        _require(self.grad_clip >= 0, f"train.grad_clip must be >= 0, got {self.grad_clip}")
        _require(self.loss in LOSSES, f"train.loss must be one of {LOSSES}, got {self.loss!r}")
        _require(self.max_minutes >= 0, f"train.max_minutes must be >= 0, got {self.max_minutes}")
        _require(self.time_limit >= 0, f"train.time_limit must be >= 0 seconds (0: no search), got {self.time_limit}")
        _require(
            0 <= self.num_threads <= MAX_COUNT, f"train.num_threads must be in 0..{MAX_COUNT}, got {self.num_threads}"
        )
        _require(
            self.selection_metric in ("mse", "mae"),
            f"train.selection_metric must be mse or mae, got {self.selection_metric!r}",
        )
        _require(
            set(self.candidates) <= set(CANDIDATE_NAMES) and len(set(self.candidates)) == len(self.candidates),
            f"train.candidates must be distinct names among {', '.join(CANDIDATE_NAMES)}, got {list(self.candidates)}",
        )
        _require(
            self.linear_rows in LINEAR_ROWS,
            f"train.linear_rows must be one of {', '.join(LINEAR_ROWS)}, got {self.linear_rows!r}",
        )
        _require(
            self.linear_ridge is None or self.linear_ridge > 0,
            f"train.linear_ridge must be positive (or auto: chosen on the training windows), got {self.linear_ridge}",
        )
        _require(self.device in ("cpu", "cuda", "auto"), f"train.device must be cpu, cuda or auto, got {self.device!r}")

    @property
    def learning_rate(self) -> float:
        """The peak learning rate training uses: train.lr, or AUTO_LR while it is still automatic."""
        return AUTO_LR if self.lr is None else self.lr


@dataclass(frozen=True)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        _require(
            self.model.transformer or not self.train.quantiles,
            "train.quantiles needs the Transformer (its quantile head reads the token states); "
            "drop model.transformer=false",
        )


SECTIONS: dict[str, type] = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig}


def resolve_auto(cfg: Config, n_train_rows: int, season: int, freq: str = "", week: int = 0) -> tuple[Config, str]:
    """Choose an automatic (0) model.patch_len and model.context_len from the data; given values are kept.

    - patch_len: the largest divisor of the season (steps per natural cycle, `metrics.season_length`) up
      to 24, so the season itself when it is 2..24 (24 hourly, 7 daily, 12 monthly, 4 quarterly); 24 for
      15-minute data (season 96), 13 for weekly (52); 4 when the frequency has no known season. Never
      more than a given context_len.
    - context_len: the longest multiple of patch_len, up to 336, that leaves at least as many training
      windows as context steps (n_train_rows - context_len - horizon + 1 >= context_len); so 336 from
      767 training rows for horizon 96 (ETTh1 has 8640). If no multiple does, one patch, as long as that
      leaves a window; otherwise a "too few rows" DataError that names the numbers. Given `week` (steps per
      week, whole patches; `data.choices` gives it for a small panel of data below a day), the most whole
      weeks up to PANEL_MAX_CONTEXT steps that leave as many windows, where that is longer: 504 for the
      electricity benchmark's 1176 training rows.

    Returns the resolved config and one line saying what was chosen ("" when nothing was automatic).
    """
    model = cfg.model
    if model.resolved:
        return cfg, ""
    shortest = model.member_contexts[-1] if model.member_contexts else model.context_len
    patch_len = model.patch_len or min(_auto_patch_len(season), shortest or AUTO_MAX_CONTEXT)
    longest_member = model.member_contexts[0] if model.member_contexts else 0  # given contexts give context_len
    context_len = model.context_len or longest_member
    context_len = context_len or _auto_context_len(n_train_rows, model.horizon, patch_len, week, season)
    chosen = dataclasses.replace(model, context_len=context_len, patch_len=patch_len)
    auto = [name for name in ("context_len", "patch_len") if not getattr(model, name)]
    flags = {"context_len": "--context-len", "patch_len": "--set model.patch_len=N"}
    short = (  # where the season does not fit: the seasonal baselines and MASE's scale fall back to the last value
        f", a context shorter than the season, so seasonal naive repeats the last value (--context-len {season} "
        "reads a whole season, where the rows allow)"
        if context_len < season
        else ""
    )
    note = (
        f"{' and '.join(f'{name} {getattr(chosen, name)}' for name in auto)} chosen for {n_train_rows} training "
        f"rows of {freq + ' ' if freq else ''}data (season {season}) and horizon {model.horizon}{short}; set "
        f"{'them' if len(auto) > 1 else 'it'} with {' / '.join(flags[name] for name in auto)}"
    )
    return dataclasses.replace(cfg, model=chosen), note


def auto_epochs(n_train_windows: int, batch_size: int, light_dropout: bool = True) -> int:
    """The most epochs of an automatic train.epochs: enough for AUTO_MIN_STEPS optimiser steps of `batch_size`
    windows, at least AUTO_MIN_EPOCHS and at most AUTO_MAX_EPOCHS (a few hundred windows get 100 short epochs),
    or LONG_EPOCHS where an epoch is long and the dropout is the automatic one that goes with it (M4 Hourly's
    234,682 windows get 3); patience stops training once validation stops improving."""
    if light_dropout and long_epochs(n_train_windows, batch_size):
        return LONG_EPOCHS
    return min(AUTO_MAX_EPOCHS, max(AUTO_MIN_EPOCHS, -(-AUTO_MIN_STEPS // epoch_steps(n_train_windows, batch_size))))


def long_epochs(n_train_windows: int, batch_size: int) -> bool:
    """Whether an epoch of `n_train_windows` takes at least LONG_EPOCH_STEPS optimiser steps (a large panel)."""
    return epoch_steps(n_train_windows, batch_size) >= LONG_EPOCH_STEPS


def epoch_steps(n_windows: int, batch_size: int) -> int:
    """Optimiser steps an epoch of `n_windows` takes on one process (at least one)."""
    return max(1, -(-n_windows // batch_size))


def longer_context(n_train_rows: int, horizon: int, patch_len: int, context_len: int) -> int:
    """The recipe search's longer context: the longest multiple of patch_len up to twice `context_len` (at most
    SEARCH_MAX_CONTEXT) that leaves as many training windows as context steps, as the automatic rule does;
    0 when that is no longer than `context_len`."""
    usable = n_train_rows - horizon + 1
    longer = min(2 * context_len, SEARCH_MAX_CONTEXT, usable // 2) // patch_len * patch_len
    return longer if longer > context_len else 0


def _auto_patch_len(season: int) -> int:
    """The largest divisor of `season` up to AUTO_MAX_PATCH, or AUTO_PATCH_NO_SEASON when that is 1."""
    season = max(season, 1)
    divisor = max(d for d in range(1, min(season, AUTO_MAX_PATCH) + 1) if season % d == 0)
    return divisor if divisor >= 2 else AUTO_PATCH_NO_SEASON


def _auto_context_len(n_train_rows: int, horizon: int, patch_len: int, week: int = 0, season: int = 1) -> int:
    """The longest multiple of patch_len up to AUTO_MAX_CONTEXT with windows >= context_len, else one patch; or,
    given `week` (a multiple of patch_len), the most whole weeks up to PANEL_MAX_CONTEXT with as many windows,
    where that is longer. A `season` past AUTO_MAX_CONTEXT, up to SEASON_MAX_CONTEXT (a day of minute data), is
    the context where it leaves as many windows: the model, the seasonal baselines and MASE's scale see the day."""
    usable = n_train_rows - horizon + 1  # training windows there would be with no context at all
    whole_season = AUTO_MAX_CONTEXT < season <= min(SEASON_MAX_CONTEXT, usable // 2) and season % patch_len == 0
    patches = (season if whole_season else min(AUTO_MAX_CONTEXT, usable // 2)) // patch_len
    whole = week and week % patch_len == 0  # weeks of whole patches (a given patch_len may not divide the week)
    weeks = min(PANEL_MAX_CONTEXT, usable // 2) // week * week if whole else 0
    if weeks > patches * patch_len:
        return weeks
    if patches >= 1:
        return patches * patch_len
    if usable - patch_len >= 1:  # one patch still leaves a window
        return patch_len
    need = patch_len + horizon
    raise DataError(
        f"too few rows: the train split has {n_train_rows} rows but needs at least {need} for the shortest "
        f"automatic context (patch_len + horizon = {patch_len} + {horizon}); provide more rows or lower "
        "--horizon or model.patch_len"
    )


DURATION_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600}


def seconds_of(text: str) -> float:
    """A duration as the command line takes it: 900, 90s, 15m, 1.5h -> seconds."""
    value = text.strip().lower()
    unit = next((u for u in sorted(DURATION_UNITS, key=len, reverse=True) if value.endswith(u)), "s")
    number = value.removesuffix(unit) if value.endswith(unit) else value
    try:
        seconds = float(number) * DURATION_UNITS[unit]
    except ValueError:
        raise ConfigError(
            f"--time-limit {text!r} is not a duration; give seconds or a unit, e.g. 900, 90s, 15m, 1h"
        ) from None
    _require(math.isfinite(seconds) and seconds > 0, f"--time-limit must be a positive duration, got {text!r}")
    return seconds


def to_dict(cfg: Config) -> dict[str, dict[str, Any]]:
    """Plain nested dict (tuples as lists), ready for YAML or JSON."""
    out: dict[str, dict[str, Any]] = {}
    for section in SECTIONS:
        values = dataclasses.asdict(getattr(cfg, section))
        out[section] = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
    return out


def config_from_dict(raw: dict[str, Any] | None, base: Config | None = None) -> Config:
    """Build a Config from a nested dict, strictly: unknown sections or keys are errors."""
    base = base or Config()
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ConfigError("a config must be a mapping with sections data, model and train")
    unknown = set(raw) - set(SECTIONS)
    if unknown:
        raise ConfigError(f"unknown config section {sorted(unknown)[0]!r}; valid sections: {', '.join(SECTIONS)}")
    sections = {}
    for name, cls in SECTIONS.items():
        values = raw.get(name) or {}
        if not isinstance(values, dict):
            raise ConfigError(f"config section {name!r} must be a mapping of keys to values")
        current = getattr(base, name)
        valid = [f.name for f in fields(cls)]
        changes = {}
        for key, value in values.items():
            if f"{name}.{key}" in REMOVED_KEYS:
                raise ConfigError(f"{name}.{key}: {REMOVED_KEYS[f'{name}.{key}']}")
            if key not in valid:
                raise ConfigError(f"unknown key {name}.{key}; valid keys in {name}: {', '.join(valid)}")
            changes[key] = _coerce(value, _field_types(cls)[key], f"{name}.{key}")
        sections[name] = dataclasses.replace(current, **changes)
    return Config(**sections)


def parse_override(text: str) -> tuple[str, str, Any]:
    """`section.key=value` -> (section, key, YAML-parsed value)."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ConfigError(f"override {text!r} must look like section.key=value, e.g. train.lr=3e-4")
    dotted, value = text.split("=", 1)
    section, key = dotted.strip().split(".", 1)
    try:
        parsed = yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError:
        parsed = value
    return section, key, parsed


def overrides_to_dict(overrides: list[str] | tuple[str, ...], into: dict | None = None) -> dict[str, dict[str, Any]]:
    """`section.key=value` strings as a nested dict, merged over `into` (later wins)."""
    raw: dict[str, dict[str, Any]] = {section: dict(values) for section, values in (into or {}).items()}
    for text in overrides:
        section, key, value = parse_override(text)
        raw.setdefault(section, {})[key] = value
    return raw


def apply_overrides(cfg: Config, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    return config_from_dict(overrides_to_dict(overrides), base=cfg)


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Defaults, then the YAML file (if any), then `section.key=value` overrides."""
    cfg = Config()
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} not found; check the --config path")
        try:
            raw = yaml.safe_load(path.read_text())
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path} is not valid YAML ({str(exc).splitlines()[0]})") from None
        cfg = config_from_dict(raw, base=cfg)
    return apply_overrides(cfg, overrides)


def with_data_path(cfg: Config, path: str | Path) -> Config:
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, path=str(path)))


def save_config(cfg: Config, path: str | Path) -> None:
    atomic_write_text(path, yaml.safe_dump(to_dict(cfg), sort_keys=False))


def given_flags(flags: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Command-line flags as config sections, keeping only those the user gave (not None)."""
    given = {section: {k: v for k, v in values.items() if v is not None} for section, values in flags.items()}
    return {section: values for section, values in given.items() if values}


def config_from_flags(
    path: str | Path | None, flags: dict[str, dict[str, Any]], overrides: list[str] | tuple[str, ...] = ()
) -> Config:
    """Defaults, then the YAML file, then the given flags, then `--set` overrides (the last wins)."""
    return config_from_dict(overrides_to_dict(overrides, into=given_flags(flags)), base=load_config(path))


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, typ: Any, name: str) -> Any:
    """Turn a YAML value into the field's declared type, or raise a ConfigError naming the field."""
    origin = typing.get_origin(typ)
    if origin is tuple:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            value = [value] if not isinstance(value, str) else [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{name} must be a list, got {value!r}")
        item_type = typing.get_args(typ)[0]
        return tuple(_coerce(v, item_type, name) for v in value)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(typ)
        if type(None) in options:  # an automatic setting: None or "auto" chooses it from the data
            if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
                return None
            (given,) = (option for option in options if option is not type(None))
            try:
                return _coerce(value, given, name)
            except ConfigError:
                raise ConfigError(f"{name} must be of type {given.__name__} or auto, got {value!r}") from None
        if isinstance(value, datetime.date):  # YAML reads 2017-06-01 as a date (data.split_borders)
            value = value.isoformat()
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):  # numpy's integers too
            return int(value)
        if not isinstance(value, str):
            raise ConfigError(f"{name} entries must be row numbers or dates, got {value!r}")
        return value
    try:
        if typ is bool:
            if isinstance(value, bool):
                return value
            raise ValueError
        if typ is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if typ is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if typ is str:
            return "" if value is None else str(value)
    except (TypeError, ValueError):
        pass
    raise ConfigError(f"{name} must be of type {typ.__name__}, got {value!r}")
