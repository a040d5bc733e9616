"""The shipped forecaster: one object from training to every forecast.

A `Predictor` holds what a forecast needs: the trained model (one member or an ensemble) and its linear
candidate (`tsformer.model.linear_candidate`), the train-only scaler, what it reads by name and role
(`tsformer.layout.Layout`), the per-series and per-column weights of the forecasters set on validation (the
fallback), and the conformal calibration of its intervals and quantiles. `forecast` is the one place those are
assembled into what ships; training returns a Predictor, and evaluate, predict, backtest and check take one.
`tsformer.fit` makes one from a DataFrame and `tsformer.load` reads a saved one; its methods `predict`,
`evaluate`, `backtest`, `check` and `save` are the Python API over those modules, which take a predictor and
name it in type hints only (at run time dependencies point one way: the predictor uses them).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd
import torch

import tsformer.backtest as backtests
import tsformer.checkpoint as checkpoint
import tsformer.evaluate as evaluation
from tsformer import __version__
from tsformer.candidates import (
    CLASSICAL,
    INTERMITTENT,
    REFERENCE,
    candidate_forecasts,
    candidate_names,
    season_for,
    week_for,
)
from tsformer.check import check_predictor
from tsformer.config import Config
from tsformer.data import (
    Prepared,
    Scaler,
    SeriesFrame,
    Source,
    Split,
    SplitBorders,
    StaticScale,
    read_series,
    scale_inputs,
)
from tsformer.data.loader import as_source, require_values
from tsformer.data.prepare import data_fingerprint, require_non_negative, scale_season, series_difference
from tsformer.errors import CheckpointError, DataError
from tsformer.fallback import Weights, apply, chosen, model_weight
from tsformer.final import FinalFit, ends_early
from tsformer.intervals import Calibration, adjust_quantiles, shipped_quantiles, weight_groups
from tsformer.layout import Layout
from tsformer.leakage import check_scaler
from tsformer.model import ForecasterBase
from tsformer.predict import forecast_after
from tsformer.results import Forecasts, TrainSummary
from tsformer.runfolder import claim, resolve_checkpoint
from tsformer.spelling import in_python_terms, python_notes

Result = TypeVar("Result")


def _on_its_threads(method: Callable[..., Result]) -> Callable[..., Result]:
    """`method` run on as many torch threads as the predictor trained with (train.num_threads; 0: the caller's),
    the caller's count restored after, as the commands run a saved run (`runs._load`)."""

    @functools.wraps(method)
    def on_threads(self: Predictor, *args, **kwargs) -> Result:
        threads = torch.get_num_threads()
        if self.config.train.num_threads:
            torch.set_num_threads(self.config.train.num_threads)
        try:
            return method(self, *args, **kwargs)
        finally:
            torch.set_num_threads(threads)

    return on_threads


@dataclass(frozen=True)
class Predictor:
    """A trained forecaster: everything `forecast` needs, by name. Made by `tsformer.fit` or `tsformer.load`."""

    config: Config  # as trained: automatic sizes resolved
    layout: Layout  # what the model reads, by role and name
    time_col: str
    freq: str
    id_cols: tuple[str, ...]  # () for a wide file
    series: tuple[tuple[str, ...], ...]  # each trained series' id values (((),) for a wide file)
    scaler: Scaler  # (n_series, len(layout.scaled)) statistics of each series' training rows
    borders: SplitBorders  # each series' train, validation and test ends
    model: ForecasterBase  # the trained member(s), in eval mode
    linear: ForecasterBase | None = None  # the linear candidate fitted on the training rows; None: no such candidate
    static: pd.DataFrame | None = None  # each trained series' static covariates as read; None without any
    static_scale: StaticScale | None = None
    static_from: str = ""  # "data": its own columns (read again from the data), "table": a table given to train
    fallback: Weights | None = None  # per series and column, the forecasters' weights from validation; None: the model
    final: FinalFit | None = None  # the model refit on every row (`tsformer.final`): predict's; None: `model`'s
    calibration: Calibration | None = None  # the conformal intervals and quantile adjustments; None: uncalibrated
    data_fingerprint: dict[str, str | int] = field(default_factory=dict)  # the data it was trained on
    summary: TrainSummary | None = None
    package_version: str = __version__
    # the config as given, before the automatic settings were chosen from the data: what a refit backtest trains
    # each fold from; None: a run saved before it was kept (checkpoint format 17)
    given: Config | None = None
    data: Prepared | None = field(default=None, repr=False, compare=False)  # the data it was fit on (not saved)

    @property
    def horizon(self) -> int:
        return self.config.model.horizon

    @property
    def context_len(self) -> int:
        return self.config.model.context_len

    @property
    def season(self) -> int:
        """The seasonal-naive period: the frequency's season if the context reaches one season back, else 1."""
        return season_for(self.freq, self.context_len)

    @property
    def week(self) -> int:
        """The weekly candidates' period (168 for hourly data), 0 where there are none."""
        return week_for(self.freq, self.context_len)

    @property
    def candidates(self) -> tuple[str, ...]:
        """The candidates this predictor forecasts beside its model: train.candidates that apply, the linear one
        where it holds one."""
        return candidate_names(self.freq, self.context_len, self.config.train.candidates, self.linear is not None)

    @property
    def interval_levels(self) -> tuple[float, ...]:
        return () if self.calibration is None else self.calibration.levels

    def replace(self, **changes) -> Predictor:
        return dataclasses.replace(self, **changes)

    # --- forecasting ------------------------------------------------------------------------------

    def for_origins(self, frame: SeriesFrame) -> tuple[Predictor, str]:
        """The predictor that forecasts after the end of `frame`'s series: with the final model as its model when
        every trained series' data reach as far as the final model read (so no origin lies inside what it
        trained on), else with the held-out one; and a note when the final model was passed over."""
        if self.final is None:
            return self, ""
        early = ends_early(self.final.until, self.series, frame)
        if not early:
            return self.replace(model=self.final.model, linear=self.final.linear, final=None), ""
        more = f" and {len(early) - 1} more" if len(early) > 1 else ""
        which = f"series {early[0]!r}{more}" if self.id_cols else "the data"
        return self.replace(final=None), (
            f"{which} end before the rows the final model trained on, so the held-out model (trained on the rows "
            "before validation) forecasts, and no forecast comes from a model that read the steps it forecasts"
        )

    def forecast(self, windows: Split, ids: np.ndarray, window_scaler: Scaler | None = None) -> Forecasts:
        """The shipped forecast of `windows`: the model's and the naive forecasts, the forecaster chosen for each
        window's series (`ids` (N,) index the trained series; -1: one not trained on, which the model forecasts),
        the model's quantiles moved with it and adjusted, and the calibrated interval half-widths.
        `window_scaler`: one row of statistics per window, for `Forecasts.units` (default: the run's scaler's
        rows of `ids`)."""
        targets = self.window_targets(ids, window_scaler)
        floor = self._floor(targets)
        return self.ship(self.forecasters(windows, floor, reference=True), windows, ids, targets, floor)

    def window_targets(self, ids: np.ndarray, window_scaler: Scaler | None = None) -> Scaler:
        """The target statistics of each window (N rows): `window_scaler`'s, or the run's scaler's rows of `ids`."""
        scaler = self.scaler if window_scaler is None else window_scaler
        return scaler.first(self.layout.n_targets).rows(ids if window_scaler is None else slice(None))

    def model_outputs(self, windows: Split) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The model's forecast (N, H, C) of the windows and its quantiles (N, H, C, Q) or None, in one pass."""
        return _outputs(self.model, windows)

    def forecasters(
        self,
        windows: Split,
        floor: torch.Tensor | None = None,
        model_outputs: tuple[torch.Tensor, torch.Tensor | None] | None = None,
        reference: bool = False,
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """Every forecaster's forecast (N, H, C) of the windows, the model's in one pass with its quantiles
        (N, H, C, Q) or None (`model_outputs`: those, when the model's were made already); none below `floor`
        (N, 1, C), each window's (`floors`; None: no floor). `reference`: with the baselines evaluate and backtest
        score against (candidates.REFERENCE) where train.candidates left them out, never weighed."""
        point, quantiles = self.model_outputs(windows) if model_outputs is None else model_outputs
        allowed = self.candidates
        classical = tuple(name for name in allowed if name in CLASSICAL)  # fit per window: only when used
        intermittent = tuple(name for name in allowed if name in INTERMITTENT)
        naive = candidate_forecasts(
            windows.context,
            windows.context_observed,
            self.horizon,
            self.season,
            self.week,
            classical,
            intermittent,
            floor,
        )
        if "linear" in allowed:
            naive["linear"], _ = _outputs(self.linear, windows)
        shown = allowed + tuple(name for name in REFERENCE if reference and name not in allowed)
        each = {"model": point, **{name: naive[name] for name in shown}}
        if floor is None:
            return each, quantiles
        floored = None if quantiles is None else torch.maximum(quantiles, floor.unsqueeze(-1))
        return {name: torch.maximum(forecast, floor) for name, forecast in each.items()}, floored

    def floors(self, ids: np.ndarray) -> torch.Tensor:
        """(N, 1, C) scaled: the floor of the forecasts of windows of series `ids` (`Scaler.floors`)."""
        return self._floor(self.window_targets(ids))

    def _floor(self, targets: Scaler) -> torch.Tensor:
        """(N, 1, C) scaled: the floor of each window's forecasts by data.floor, from its target statistics
        (`Scaler.floors`); a panel's column is floored for every series or none, as its training rows decide
        (`Scaler.bounded_columns`: one column of a long file is one quantity)."""
        columns = self.scaler.first(self.layout.n_targets).bounded_columns() if self.id_cols else None
        return torch.from_numpy(targets.floors(self.config.data.floor, columns)).unsqueeze(1)

    def ship(
        self,
        forecasts: tuple[dict[str, torch.Tensor], torch.Tensor | None],
        windows: Split,
        ids: np.ndarray,
        targets: Scaler,
        floor: torch.Tensor,
    ) -> Forecasts:
        """`forecast` from the forecasters' outputs (`forecasters`, floored at `floor`), with this predictor's
        choices; `targets`: each window's target statistics (`window_targets`)."""
        each, model_quantiles = forecasts
        point = apply(self.fallback, each, ids)
        c = self.calibration
        scale = None if c is None else c.window_scales(windows)  # (N, C): the widths' and scaled shifts' unit
        quantiles = None
        if model_quantiles is not None:  # around the shipped point: the model's offsets by its weight in it
            weight = model_weight(self.fallback, ids, len(point), self.layout.n_targets)
            if c is not None and c.quantile_method not in ("scaled", "groups"):
                weight = torch.ones_like(weight)  # calibrated before format 15, on the model's whole offsets
            quantiles = shipped_quantiles(model_quantiles, each["model"], point, weight)
            if c is not None:
                per = scale if c.quantile_method == "scaled" else None
                quantiles = adjust_quantiles(quantiles, c.quantile_adjust, weight_groups(weight), per)
            quantiles = torch.maximum(quantiles, floor.unsqueeze(-1))
        half_widths = None if c is None else c.half_widths(windows, scale)
        n_targets = self.layout.n_targets
        return Forecasts(
            each=each,
            point=point,
            quantiles=quantiles,
            half_widths=half_widths,
            levels=self.interval_levels,
            quantile_levels=tuple(sorted(self.config.train.quantiles)) if quantiles is not None else (),
            mean=targets.mean,
            std=targets.std,
            chosen=chosen(self.fallback, ids, n_targets),
            floor=floor.numpy(),
        )

    # --- reading data as trained ------------------------------------------------------------------

    def read_frame(self, source: Source, static: Source | None = None) -> SeriesFrame:
        """`source` read with the run's targets, time and id columns, covariates and frequency; the static
        covariates from `static` (a table with a row per series), else as in training: the data's own columns,
        or the table stored for the trained series."""
        if static is not None and not self.layout.static:
            raise DataError("this model reads no static covariates; drop --static")
        from_data = static is not None or self.static_from == "data"
        data_cfg = dataclasses.replace(
            self.config.data,
            path="" if isinstance(source, pd.DataFrame) else str(source),
            targets=self.layout.targets,
            time_col=self.time_col,
            id_cols=self.id_cols,
            past_covs=self.layout.past,
            future_covs=self.layout.future,
            static_covs=self.layout.static if from_data else (),
            static_path="",
            sort=True,  # rows in any order: the run knows each series' clock, and a shuffled history is the same one
        )
        try:
            frame = read_series(source, data_cfg, self.freq, self.id_cols, static=static)
        except DataError as exc:
            if str(exc).startswith(("target column", "time column", "id column")):
                ids = f", id column{'s' * (len(self.id_cols) > 1)} {', '.join(self.id_cols)}" if self.id_cols else ""
                name = "the DataFrame" if isinstance(source, pd.DataFrame) else source
                raise DataError(
                    f"{name} does not match the model, which was trained on columns {', '.join(self.layout.targets)} "
                    f"with time column {self.time_col!r}{ids}: {exc}"
                ) from None
            retarget = {  # train's advice; the model's columns are fixed, so predict's is to mend the data
                "drop it or choose other --target columns": "give it values: the model reads it",
                "or choose other --target columns": "or correct it in the data",
                "choose numeric --target columns": "give numbers",
            }
            if any(advice in str(exc) for advice in retarget):
                message = str(exc)
                for advice, mended in retarget.items():  # the longest first: "drop it or choose ..." whole
                    message = message.replace(advice, mended)
                raise DataError(message) from None
            raise
        require_values(frame, self.config.data.fill)
        if self.config.data.floor == "zero":
            require_non_negative(frame)
        if self.layout.static and not from_data:
            frame = dataclasses.replace(frame, static=self._stored_static(frame))
        return frame

    def refit_config(self) -> tuple[Config, str]:
        """The config a refit backtest trains each fold with, and a note where some settings cannot be chosen
        again per fold: the config as given, so each fold chooses its automatic settings from the rows before
        its origin; a searched run's recipe as the search chose it (one search, not one per fold); a run saved
        before the given config was kept, its settings as chosen."""
        if self.given is not None and not self.given.train.time_limit:
            return self.given, ""
        cfg = dataclasses.replace(self.config, train=dataclasses.replace(self.config.train, time_limit=0.0))
        why = "searched (train.time_limit)" if self.given is not None else "saved before its given config was kept"
        return cfg, (
            f"each fold trains with the settings this run chose on its own validation rows, some of them after a "
            f"fold's origin, as the run was {why}; to choose them per fold, refit from a config: tsformer backtest "
            "FOLDS --config CONFIG --refit"
        )

    def _static_table(self) -> pd.DataFrame | None:
        """The static covariates it was fit with from a table, as that table: the id columns, then the
        covariates, a row per trained series; None when they came from the data's own columns, or there are none."""
        if self.static is None or self.static_from != "table":
            return None
        ids = pd.DataFrame(list(self.series), columns=list(self.id_cols))
        return pd.concat([ids, self.static.reset_index(drop=True)], axis=1)

    def _stored_static(self, frame: SeriesFrame) -> pd.DataFrame:
        """The trained series' static covariates, for the frame's series; a series not trained on needs its own."""
        known = {key: i for i, key in enumerate(self.series)}
        new = [key for key in frame.keys if key not in known]
        if new:
            raise DataError(
                f"series {'/'.join(new[0])!r} was not in training, so its static covariates "
                f"({', '.join(self.layout.static)}) are unknown; pass them with --static"
            )
        return self.static.iloc[[known[key] for key in frame.keys]].reset_index(drop=True)

    def read(self, source: Source | None = None, static: Source | None = None) -> Prepared:
        """The data the run was trained on (or `source`), read with its layout, scaler and split borders, as
        evaluate, backtest and check score it. It must hold the run's series, reach the end of each one's test
        split and hold the training rows the scaler was fit on."""
        if source is None and self.data is not None and static is None:
            return self.data
        source = as_source(source) if source is not None else self._path()
        frame = self.read_frame(source, static)
        where = "the DataFrame" if isinstance(source, pd.DataFrame) else str(source)
        if set(frame.keys) == set(self.series):  # the run's series, listed in any order
            frame = frame.in_series_order(self.series)
        if frame.keys != self.series:
            raise DataError(f"{where} {series_difference(frame, self.series)}; use the data the model was trained on")
        short = np.flatnonzero(frame.lengths < self.borders.test_end)
        if len(short):
            i = int(short[0])
            name = f"series {frame.names[i]!r} of " if self.id_cols else ""
            raise DataError(
                f"{name}{where} has {frame.lengths[i]} rows but the run's test split ends at row "
                f"{self.borders.test_end[i]}; use the data the model was trained on"
            )
        if not check_scaler(frame, self.borders, self.scaler, scale_season(self.config, self.freq)).passed:
            raise DataError(
                f"the training rows of {where} differ from those the run was trained on; "
                "use the data the model was trained on"
            )
        return Prepared(
            config=self.config,
            frame=frame,
            borders=self.borders,
            scaler=self.scaler,
            layout=self.layout,
            static_scale=self.static_scale,
            inputs=scale_inputs(frame, self.layout, self.scaler, self.static_scale),
            fingerprint=data_fingerprint(frame),
            notes=frame.notes,
        )

    # --- the Python API ---------------------------------------------------------------------------

    @in_python_terms
    @_on_its_threads
    def predict(
        self, data: Source | None = None, future: Source | None = None, static_df: Source | None = None
    ) -> pd.DataFrame:
        """The next `horizon` steps after each series' last row of `data` (default: the data it was fit on), in
        the data's units: the time column (and id columns), each target, its interval bounds
        (`<target>_lower_80`, ...) and quantiles (`<target>_q0.1`, ...), the same columns `tsformer predict`
        writes. `future`: the known-future covariates' values over those steps, per series; `static_df`: the
        static covariates of series it was not trained on. How the data was read is in `.attrs["notes"]`. Errors and
        notes name keywords and config keys, not flags (`tsformer.spelling`)."""
        source = as_source(data) if data is not None else self.data.frame if self.data is not None else self._path()
        future = None if future is None else as_source(future, "future")
        static_df = None if static_df is None else as_source(static_df, "static_df")
        forecast = forecast_after(self, source, future, static_df)
        frame = forecast.frame.copy()
        frame.attrs["notes"] = python_notes(forecast.notes)
        return frame

    @in_python_terms
    @_on_its_threads
    def evaluate(self, data: Source | None = None, split: str = "test") -> pd.DataFrame:
        """Honest metrics on every window of the held-out test split (or `split="val"`): one row per forecaster
        (`model` is what `predict` ships, then the naive baselines) with MSE and MAE on scaled values, MAE and
        RMSE in the data's units, sMAPE and MASE; and, for the model, each interval's coverage, width and MSIS.
        `tsformer.evaluate.evaluate` gives the whole report; `.attrs["notes"]` what it left out."""
        report = evaluation.evaluate(self, self.read(data), split)
        table = report.table()
        notes = (report.intervals_note, report.mase_note, report.smape_note, report.after_note)
        table.attrs["notes"] = python_notes(notes)
        return table

    @in_python_terms
    @_on_its_threads
    def backtest(
        self,
        data: Source | None = None,
        windows: int | None = None,
        step: int = 0,
        start: str | pd.Timestamp | None = None,
        refit: bool = False,
        static_df: Source | None = None,
    ) -> pd.DataFrame:
        """Forecasts at `windows` rolling origins `step` apart (default: the horizon) after the run's validation
        (default: every origin that fits there), each scored against the truth: one row per origin, series,
        step and target, with the forecast, its interval bounds, the naive forecasts and the truth (as
        `tsformer backtest --out` writes, its times as timestamps); `.attrs["notes"]` says how many origins and
        which series it left out. `refit=True` trains a new model at each origin (`runs.REFIT_WINDOWS` by
        default) on the data before it, with this predictor's config, as `tsformer backtest --refit` does;
        `static_df` then gives the series' static covariates (default: the table it was fit with)."""
        step = 0 if step is None else step
        if refit:
            from tsformer.runs import refit_backtest  # runs trains, and training makes predictors: imported here

            cfg, note = self.refit_config()
            source = as_source(data) if data is not None else self.data.frame if self.data is not None else None
            static = as_source(static_df, "static_df") if static_df is not None else self._static_table()
            result = refit_backtest(cfg, None, windows, step, start, source=source, static=static, note=note)
        else:
            result = backtests.backtest(self, self.read(data), windows, step, start)
        table = result.forecasts.copy()
        table.attrs["notes"] = python_notes(result.notes)
        return table

    @in_python_terms
    @_on_its_threads
    def check(self, data: Source | None = None) -> pd.DataFrame:
        """Every leakage check on this predictor and its data: one row per check (name, passed, max_change,
        detail, skipped). The model checks probe the assembled model; the data checks rerun the pipeline on the
        data. A skipped check (it could not run) has passed True and proves nothing: `passed.all()` with no
        `skipped` is the whole proof."""
        results = check_predictor(self, self.read(data))
        return pd.DataFrame([dataclasses.asdict(r) for r in results])

    @in_python_terms
    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write the predictor as the run folder `path` (its model.pt and config.yaml) and return the path;
        `tsformer.load(path)` reads it back. A folder already there that is not empty is refused unless
        `overwrite` and it is a run, which is then replaced whole (no file of the old run is left beside the new
        one); the folder is written aside and moved into place, as training writes a run (`runfolder`)."""
        folder = claim(Path(path), overwrite, resume=False, resumable=False, named="path")
        try:
            checkpoint.save_run(self, folder.path)
            folder.publish()
        finally:
            folder.release()
        return folder.final

    def _path(self) -> str:
        """The path of the data it was trained on, when it was trained on a file."""
        if not self.config.data.path:
            raise DataError("this predictor keeps no data and was trained on a DataFrame; pass the data with --csv")
        return self.config.data.path


def load_predictor(path: str | Path) -> Predictor:
    """The Predictor in a run folder or a checkpoint file; any problem is a CheckpointError."""
    return Predictor(**checkpoint.read_predictor(resolve_checkpoint(path)))


def load_finished(path: str | Path) -> Predictor:
    """The Predictor of a finished run (`load_predictor`): a run whose training stopped before the end (a kill,
    Ctrl-C, a closed pipe) holds only its best epoch's model, without the fallback, the intervals or the final
    model, and is refused with how to finish it."""
    predictor = load_predictor(path)
    if predictor.summary is None:
        folder = Path(path) if Path(path).is_dir() else Path(path).parent
        raise CheckpointError(
            f"run {folder} is unfinished: training stopped before the fallback, the intervals and the final model "
            f"were made; finish it with: tsformer train --resume --out {folder}"
        )
    return predictor


def load_train_state(path: str | Path) -> tuple[Predictor, dict]:
    """The Predictor of a run's `last.pt` and its training state (optimizer, rng, loop), to resume."""
    fields, state = checkpoint.read_train_state(Path(path))
    return Predictor(**fields), state


def _outputs(model: ForecasterBase, windows: Split) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`model`'s forecast (N, H, C) of the windows and its quantiles (N, H, C, Q) or None, in one pass, on the CPU."""
    outputs = list(model.output_batches(windows.context, windows.context_observed, windows.covariates))
    point = torch.cat([p for p, _ in outputs]).cpu()
    quantiles = None if outputs and outputs[0][1] is None else torch.cat([q for _, q in outputs]).cpu()
    return point, quantiles
