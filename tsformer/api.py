"""The Python API: `fit` a Predictor on a DataFrame (or a CSV), `load` a saved one."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from tsformer.config import Config, config_from_dict, load_config, seconds_of, with_data_path
from tsformer.data.loader import SeriesFrame, as_source
from tsformer.errors import ConfigError
from tsformer.predictor import Predictor, load_finished
from tsformer.spelling import in_python_terms, python_terms

Data = pd.DataFrame | pd.Series | str | Path


@in_python_terms
def fit(
    data: Data | None = None,
    *,
    horizon: int | None = None,
    target: str | list[str] | None = None,
    id_col: str | list[str] | None = None,
    time_col: str | None = None,
    future_covs: list[str] | None = None,
    past_covs: list[str] | None = None,
    static_df: pd.DataFrame | str | Path | None = None,
    static_covs: list[str] | None = None,
    config: Mapping[str, Any] | str | Path | Config | None = None,
    time_limit: float | str | None = None,
    out: str | Path | None = None,
    overwrite: bool = False,
    resume: bool = False,
    progress: bool = False,
    notes: bool | None = None,
) -> Predictor:
    """Train a forecaster and return its `Predictor` (`.predict`, `.evaluate`, `.backtest`, `.check`, `.save`).

    data: a DataFrame, a Series with a DatetimeIndex (one series, its name the target; `y` when unnamed), or a
        CSV path. Wide: a time column (found by name: date, timestamp, ds, ...; or a
        DatetimeIndex) and one numeric column per series. Long: one row per series and time, e.g.
        `unique_id, ds, y` (the id column is found by name too). None: the config's data.path.
    horizon: steps to forecast (model.horizon; default 96).
    target: the column(s) to forecast (default: `y` in long format, else every numeric column).
    id_col: long format's id column(s), if not found by name; time_col: the time column, likewise.
    future_covs: known-future covariates, known up to the end of the forecast (a price, a load forecast);
        `predict` then needs their next `horizon` values in `future=`.
    past_covs: past-only covariates, observed with the target and unknown ahead.
    static_df: static covariates, one row per series: its id column(s) and one column per covariate (numbers,
        or categories). static_covs: which of its columns to use (default: all), or, without static_df,
        columns of `data` that hold one value per series.
    config: any setting as dotted keys ({"train.epochs": 5, "train.seed": 0}), nested sections
        ({"train": {"epochs": 5}}), a YAML path, or a Config; the named arguments above override it.
    time_limit: seconds for the whole fit (or "15m", "1h"): a recipe search on validation within them
        (`tsformer.search`: a longer context, a weekly cycle, another loss, more members); default none, one recipe.
    out: a run folder to train into (checkpoints every epoch, resumable with resume=True; `tsformer evaluate
        OUT` and the other commands read it); None trains in memory and writes nothing.
    progress: print progress per epoch. notes: print how the data was read and what was chosen from it (default:
        as progress; `.summary` and each choice's attributes hold them either way).

    The same data, settings and seed give the same predictor as `tsformer train` (bit for bit on CPU; with a
    time limit, what the search reaches depends on the machine's speed).
    """
    from tsformer.datasets import find_data_file
    from tsformer.train import train

    cfg = _config(config)
    data = data if data is None or isinstance(data, SeriesFrame) else as_source(data)
    given = {
        "model": {"horizon": horizon},
        "train": {"time_limit": seconds_of(time_limit) if isinstance(time_limit, str) else time_limit},
        "data": {
            "targets": _names(target),
            "id_cols": _names(id_col),
            "time_col": time_col,
            "future_covs": _names(future_covs),
            "past_covs": _names(past_covs),
            "static_covs": _names(static_covs),
        },
    }
    changes = {section: {k: v for k, v in values.items() if v is not None} for section, values in given.items()}
    cfg = config_from_dict(changes, base=cfg)
    source = None
    if isinstance(data, pd.DataFrame | SeriesFrame):
        source = data
    elif data is not None:
        cfg = with_data_path(cfg, find_data_file(str(data), flag=""))
    elif isinstance(config, str | Path) and cfg.data.path:  # a config's relative data path may lie beside it
        cfg = with_data_path(cfg, find_data_file(cfg.data.path, flag="", config=config))
    if resume and out is None:
        raise ConfigError("resume=True continues a run folder: give it as out=")
    shown = progress if notes is None else notes
    return train(
        cfg,
        out,
        resume=resume,
        overwrite=overwrite,
        show_progress=progress,
        source=source,
        static=static_df,
        show_notes=shown,
        spelled=python_terms,
    )


@in_python_terms
def load(path: str | Path) -> Predictor:
    """The Predictor saved in a run folder (`tsformer train --out`, `Predictor.save`) or a model.pt."""
    return load_finished(path)


def _config(config: Mapping[str, Any] | str | Path | Config | None) -> Config:
    """A Config from dotted keys, nested sections, a YAML path or a Config."""
    if config is None:
        return Config()
    if isinstance(config, Config):
        return config
    if isinstance(config, str | Path):
        return load_config(config)
    if not isinstance(config, Mapping):
        raise ConfigError(f"config must be a mapping, a YAML path or a Config, got {type(config).__name__}")
    nested: dict[str, dict[str, Any]] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            nested.setdefault(key, {}).update(value)
        elif "." in key:
            section, name = key.split(".", 1)
            nested.setdefault(section, {})[name] = value
        else:
            raise ConfigError(f"config key {key!r} must be section.key, e.g. train.epochs")
    return config_from_dict(nested)


def _names(value: str | list[str] | tuple[str, ...] | None) -> list[str] | None:
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)
