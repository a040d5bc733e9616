"""The only code that knows the checkpoint file format: a Predictor, and while training its training state.

It writes a predictor's fields and reads them back (`tsformer.predictor.load_predictor` makes the Predictor
of them). One file holds everything a Predictor is: the resolved config, the layout by name, the scaler, the
series, frequency and split borders, the fallback choice, the calibration, the weights, a fingerprint
of the data, versions. `last.pt` adds the training state (optimizer, RNG, loop) for --resume. Files are
written atomically (temp file + rename) and read with `weights_only=True`, so loading never runs code
from the file; every field is checked against the others before use.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import warnings
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import torch

from tsformer import __version__
from tsformer.candidates import candidate_names
from tsformer.config import REMOVED_KEYS, Config, config_from_dict, save_config, to_dict
from tsformer.data import Scaler, SplitBorders, StaticScale, parse_freq
from tsformer.data.calendar import calendar_names
from tsformer.errors import CheckpointError, TsformerError
from tsformer.fallback import FORECASTERS, Weights
from tsformer.files import atomic_write
from tsformer.final import FinalFit
from tsformer.intervals import QUANTILE_GROUPS, QUANTILE_METHODS, Calibration, pair_shifts, quantile_pairs
from tsformer.layout import Layout
from tsformer.model import build_forecaster, linear_candidate
from tsformer.results import TrainSummary
from tsformer.runfolder import CONFIG_FILE, MODEL_FILE

FORMAT_NAME = "tsformer-checkpoint"
FORMAT_VERSION = 17  # 2: data fingerprint, renamed weights. 3: many series, covariates. 4: fallback per series.
# 5: interval widths per unit of each window's scale. 6: a Predictor: the layout by name, static covariates,
# the calibration (with the refit model's borders) and the training summary. 7: the calibration's error count
# and the interval levels it left out; what stopped training. 8: the fallback may name the classical candidates
# (drift, seasonal and weekly naive with drift); a format 7 file still reads, as its names are among them.
# 9: the final model fit on every row (`tsformer.final`), and the fallback may name blends of the model and a
# candidate, and the calibration no longer names a calibration model (train.interval_calibration is gone); a
# format 7 or 8 file reads as a run without a final model, its intervals as they were calibrated.
# 10: the fallback as weights of the model and the candidates per series and column (a format 7 to 9 file's
# forecaster names read as weights of one, or of two halves for a blend).
# 11: the linear candidate (`tsformer.model.linear_candidate`) as each member's skip weights, held out and final;
# train.least_squares_start is gone (a format 10 file's is dropped; its run has no linear candidate).
# 12: train.linear_rows, the rows the linear candidate was fitted on (a format 11 file's were every token's).
# 13: train.linear_ridge, the ridge it was fitted with (an earlier file's was linear_candidate.RIDGE).
# 14: each quantile's own conformal shift (an earlier file's widening of each pair reads as the same shifts).
# 15: those shifts per group of windows, around the model's offsets by its weight (a format 13 or 14 file's
# shifts read as the same for every group, around the model's whole offsets, as they were calibrated).
# 16: the quantile shifts per unit of each window's scale where the intervals' widths are ("scaled"; a format 15
# file's are in scaled units, "groups").
# 17: the config as given, before the automatic settings were chosen (`Predictor.given`; an earlier file has none).
READS_FORMATS = (7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17)


def save_predictor(predictor, path: str | Path, train_state: dict[str, Any] | None = None) -> None:
    """Write atomically: a kill or a full disk at any moment leaves either the old file or the new one.

    The payload is serialised in memory first, so a failed write is an OSError naming `path`
    (torch's zip writer would report a full disk as a RuntimeError).
    """
    p = predictor
    payload = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "package_version": p.package_version,
        "config": to_dict(p.config),
        "given_config": None if p.given is None else to_dict(p.given),
        "layout": p.layout.to_dict(),
        "time_col": p.time_col,
        "freq": p.freq,
        "id_cols": list(p.id_cols),
        "series": [list(key) for key in p.series],
        "scaler": p.scaler.to_dict(),
        "borders": p.borders.to_list(),
        "static": None if p.static is None else _table_to_dict(p.static),
        "static_scale": None if p.static_scale is None else p.static_scale.to_dict(),
        "static_from": p.static_from,
        "data_fingerprint": dict(p.data_fingerprint),
        "fallback": None if p.fallback is None else _fallback_to_dict(p.fallback),
        "calibration": None if p.calibration is None else _calibration_to_dict(p.calibration),
        "summary": None if p.summary is None else {**dataclasses.asdict(p.summary), "lines": list(p.summary.lines)},
        "model_state": _weights(p.model),
        "linear": None if p.linear is None else linear_candidate.skips(p.linear),
        "final": None if p.final is None else _final_to_dict(p.final),
        "train_state": train_state,
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    atomic_write(path, lambda handle: handle.write(buffer.getbuffer()))


def save_run(predictor, folder: Path) -> Path:
    """The predictor as a run folder: `folder`/model.pt and its resolved config.yaml."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise CheckpointError(f"{folder} is a file, not a folder; choose another path to save to") from None
    save_config(predictor.config, folder / CONFIG_FILE)
    save_predictor(predictor, folder / MODEL_FILE)
    return folder


def read_predictor(path: Path) -> dict[str, Any]:
    """The fields of the Predictor in a checkpoint file, each checked against the others; any problem is a
    CheckpointError."""
    return _fields(*_load(path))


def read_train_state(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Predictor fields of `last.pt` and its training state (optimizer, rng, loop)."""
    payload, where = _load(path)
    state = payload.get("train_state")
    if not (isinstance(state, dict) and {"optimizer", "rng", "loop"} <= set(state)):
        raise CheckpointError(f"{where} holds no training state; it cannot be resumed, so start a new run")
    return _fields(payload, where), state


def _is_text(path: Path) -> bool:
    """Whether the file starts as text does (a CSV in any 8-bit encoding: no NUL byte), not as a checkpoint (a
    zip archive, or a pickle's protocol opcode)."""
    with path.open("rb") as handle:
        head = handle.read(512)
    return bool(head) and not head.startswith((b"PK", b"\x80")) and b"\x00" not in head


def _load(path: Path) -> tuple[dict[str, Any], Path]:
    """The payload of a checkpoint file, read without executing code from it, of this format version."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} not found; train a model first or check the run folder")
    if _is_text(path):
        raise CheckpointError(
            f"{path} is a text file (data?), not a trained run: give the run folder `tsformer train --out` made "
            "(the commands that read data take it with --csv)"
        )
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
    if version not in READS_FORMATS:
        raise CheckpointError(
            f"{path} has checkpoint format {version} but this tsformer ({__version__}) reads format "
            f"{', '.join(map(str, READS_FORMATS[:-1]))} or {READS_FORMATS[-1]}; use a matching tsformer version or "
            "retrain"
        )
    return payload, path


def _fields(payload: dict[str, Any], path: Path) -> dict[str, Any]:
    """A Predictor's fields from a payload, every field checked against the others."""
    try:
        config = config_from_dict(_current_keys(payload["config"]))
        layout = Layout.from_dict(payload["layout"])
        _check_layout(layout, config, payload["freq"])
        model = _model(payload["model_state"], config, layout)
        linear = _linear(payload.get("linear"), config, layout)
        final = payload.get("final")
        summary = payload.get("summary")
        given = payload.get("given_config")
        fields = dict(
            config=config,
            given=None if given is None else config_from_dict(_current_keys(given)),
            layout=layout,
            time_col=payload["time_col"],
            freq=payload["freq"],
            id_cols=tuple(payload["id_cols"]),
            series=tuple(tuple(key) for key in payload["series"]),
            scaler=Scaler.from_dict(payload["scaler"]),
            borders=SplitBorders.from_list(payload["borders"]),
            model=model,
            linear=linear,
            static=None if payload["static"] is None else _table_from_dict(payload["static"]),
            static_scale=None if payload["static_scale"] is None else StaticScale.from_dict(payload["static_scale"]),
            static_from=str(payload["static_from"]),
            fallback=_fallback_from(payload["fallback"], config, payload["freq"]),
            final=None if final is None else _final_from_dict(final, config, layout, len(payload["series"])),
            calibration=None
            if payload["calibration"] is None
            else _calibration_from_dict(payload["calibration"], config),
            data_fingerprint=payload["data_fingerprint"],
            summary=None if summary is None else TrainSummary(**{**summary, "lines": tuple(summary["lines"])}),
            package_version=str(payload.get("package_version", "")),
        )
        _validate(SimpleNamespace(**fields))
    except (KeyError, TypeError, ValueError, TsformerError) as exc:
        detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise CheckpointError(
            f"{path} is a damaged tsformer checkpoint ({detail}); retrain or use the original file"
        ) from None
    return fields


def _current_keys(raw: Any) -> Any:
    """A stored config in today's keys: without those an earlier format had and this one dropped (REMOVED_KEYS:
    format 7 and 8 runs stored train.interval_calibration, removed with the calibration model, and format 10 runs
    train.least_squares_start, now the linear candidate), and model.cycle 0 where a run from before the learned
    cycle stored none (it has no cycle; unset now means chosen from the data), and train.linear_rows every_token
    and train.linear_ridge linear_candidate.RIDGE where a run from before format 12 or 13 stored none (its linear
    candidate was fitted so)."""
    if isinstance(raw, dict) and isinstance(raw.get("train"), dict):
        train = {k: v for k, v in raw["train"].items() if f"train.{k}" not in REMOVED_KEYS}
        raw = {**raw, "train": {"linear_rows": "every_token", "linear_ridge": linear_candidate.RIDGE, **train}}
    if isinstance(raw, dict) and isinstance(raw.get("model"), dict) and raw["model"].get("cycle") is None:
        raw = {**raw, "model": {**raw["model"], "cycle": 0}}
    return raw


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def _model(state: Any, config, layout: Layout):
    """The forecaster of a config and layout with the stored weights, in eval mode; ValueError if they do not fit."""
    model = build_forecaster(config.model, layout, config.train.loss, config.train.quantiles)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError("model weights must be a mapping of names to tensors")
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(f"its weights do not fit its own config ({str(exc).splitlines()[0]})") from None
    return model.eval()


def _final_to_dict(final: FinalFit) -> dict[str, Any]:
    return {
        "model_state": _weights(final.model),
        "until": final.until.tolist(),
        "steps": final.steps,
        "n_windows": final.n_windows,
        "seconds": final.seconds,
        "linear": None if final.linear is None else linear_candidate.skips(final.linear),
    }


def _final_from_dict(raw: dict[str, Any], config, layout: Layout, n_series: int) -> FinalFit:
    until = np.asarray(raw["until"])
    if until.shape != (n_series,) or until.dtype.kind != "i":
        raise ValueError("the final model must name one last timestamp per series")
    model = _model(raw["model_state"], config, layout)
    linear = _linear(raw.get("linear"), config, layout)
    return FinalFit(
        model, until.astype(np.int64), int(raw["steps"]), int(raw["n_windows"]), float(raw["seconds"]), linear
    )


def _linear(stored: Any, config, layout: Layout):
    """The stored linear candidate (each member's skip weights), or None where the run has none."""
    if stored is None:
        return None
    if not isinstance(stored, list) or not all(isinstance(w, torch.Tensor) for w in stored):
        raise ValueError("the linear candidate must be a list of skip weights, one per member")
    return linear_candidate.from_skips(config.model, layout, stored)


def _check_layout(layout: Layout, config, freq: Any) -> None:
    if not isinstance(freq, str):
        raise ValueError(f"frequency {freq!r} is not text")
    parse_freq(freq, "its frequency")
    layout.check()
    expected = calendar_names(freq, config.data.calendar)
    if layout.calendar != expected:
        raise ValueError(f"calendar features {list(layout.calendar)} must be {list(expected)} for frequency {freq}")
    if layout.cycle != config.model.cycle:
        raise ValueError(f"the layout's cycle {layout.cycle} must be model.cycle {config.model.cycle}")


def _validate(p: SimpleNamespace) -> None:
    """Every field is of its type and agrees with the others; raises ValueError or TsformerError."""
    layout, columns = p.layout, p.layout.targets
    if not isinstance(p.time_col, str) or not p.time_col or p.time_col in columns:
        raise ValueError(f"time column {p.time_col!r} must be a name other than the columns'")
    id_cols, series = p.id_cols, p.series
    if not all(isinstance(c, str) and c for c in id_cols) or set(id_cols) & {*columns, p.time_col}:
        raise ValueError(f"id columns {list(id_cols)} must be names other than the time and target columns")
    if not series or not all(
        isinstance(key, tuple) and len(key) == len(id_cols) and all(isinstance(v, str) for v in key) for key in series
    ):
        raise ValueError(f"series ids must be {len(id_cols)} names each")
    if len(set(series)) != len(series):
        raise ValueError("series ids must be distinct")
    shape = (len(series), len(layout.scaled))  # calendar features are not scaled
    mean, std = p.scaler.mean, p.scaler.std
    if mean.shape != shape or std.shape != shape:
        raise ValueError(
            f"scaler has {mean.shape} means and {std.shape} stds for {shape[0]} series x {shape[1]} columns"
        )
    if not (np.isfinite(mean).all() and np.isfinite(std).all() and (std > 0).all()):
        raise ValueError("scaler statistics must be finite with positive stds")
    if p.scaler.lowest is not None and p.scaler.lowest.shape != shape:
        raise ValueError(f"scaler has {p.scaler.lowest.shape} lowest values for {shape[0]} series x {shape[1]} columns")
    ends = np.stack([p.borders.train_end, p.borders.val_end, p.borders.test_end])  # (3, n_ids)
    if ends.shape != (3, len(series)) or ends.dtype.kind != "i" or not (np.diff(ends, axis=0) >= 0).all():
        raise ValueError(f"split borders must be increasing row numbers, one set per series, got {ends.tolist()[:3]}")
    if not id_cols and not 0 < ends[0, 0] < ends[1, 0] < ends[2, 0]:
        raise ValueError(f"split borders {ends[:, 0].tolist()} must be increasing row numbers")
    fingerprint = p.data_fingerprint
    if not isinstance(fingerprint, dict) or set(fingerprint) != {"rows", "first", "last", "sha256"}:
        raise ValueError("data fingerprint must hold rows, first, last and sha256")
    if p.fallback is not None:
        names = candidate_names(p.freq, p.config.model.context_len, p.config.train.candidates, p.linear is not None)
        allowed = ("model", *names)
        values = p.fallback.values
        if (
            not set(p.fallback.names) <= set(allowed)
            or values.shape != (len(series), len(columns), len(p.fallback.names))
            or not np.isfinite(values).all()
            or (values < 0).any()
            or not np.allclose(values.sum(-1), 1.0)
        ):
            raise ValueError(
                f"fallback must weigh {', '.join(allowed)} per series and column, non-negative and summing to 1"
            )
    if p.linear is not None and p.config.train.linear_rows not in linear_candidate.ROWS:
        raise ValueError(f"a linear candidate needs train.linear_rows, one of {', '.join(linear_candidate.ROWS)}")
    if p.linear is not None and p.config.train.linear_ridge is None:
        raise ValueError("a linear candidate needs train.linear_ridge, the ridge it was fitted with")
    if layout.static:
        table = p.static
        if table is None or list(table.columns) != list(layout.static) or len(table) != len(series):
            raise ValueError("static covariates must hold one row per series and the layout's static columns")
        if (p.static_scale is None) != (not layout.static_numeric) or p.static_from not in ("data", "table"):
            raise ValueError("static covariates need their scale (when numeric) and where they come from")
    _validate_calibration(p.calibration, p.config, len(columns), len(series))


def _fallback_to_dict(fallback: Weights) -> dict[str, Any]:
    return {"names": list(fallback.names), "weights": torch.from_numpy(fallback.values)}


def _fallback_from(stored, config, freq: str) -> Weights | None:
    """The stored fallback: weights (format 10), or a table of forecaster names (7 to 9; () is the model's)."""
    if stored is None or (isinstance(stored, list) and not stored):
        return None
    if isinstance(stored, dict):
        return Weights(tuple(stored["names"]), stored["weights"].double().numpy())
    table = tuple(tuple(row) for row in stored)
    names = ("model", *candidate_names(freq, config.model.context_len, config.train.candidates))
    if not {name for row in table for name in row} <= set(FORECASTERS):
        raise ValueError(f"fallback must name one of {', '.join(FORECASTERS)} per series and column")
    return Weights.of_names(table, names)


def _validate_calibration(calibration: Calibration | None, config, n_columns: int, n_series: int) -> None:
    if calibration is None:
        return
    horizon, levels = config.model.horizon, calibration.levels
    widths, typical = calibration.widths, calibration.typical
    if not (isinstance(widths, torch.Tensor) and widths.shape == (len(levels), horizon, n_columns)):
        raise ValueError(f"interval widths must be (levels, horizon, columns) for levels {list(levels)}")
    scaled = config.train.interval_scale == "seasonal"
    if (typical is not None) != (scaled and bool(levels)) or (
        typical is not None
        and not (isinstance(typical, torch.Tensor) and typical.shape == (n_columns,) and bool((typical > 0).all()))
    ):
        raise ValueError("the typical interval scale must be one positive value per column, with seasonal intervals")
    adjust, n_quantiles = calibration.quantile_adjust, len(config.train.quantiles)
    if adjust is not None and not (
        isinstance(adjust, torch.Tensor) and adjust.shape == (QUANTILE_GROUPS, n_quantiles, horizon, n_columns)
    ):
        raise ValueError(f"quantile shifts must be (groups, quantiles, horizon, columns) for {n_quantiles} quantiles")
    if calibration.quantile_method not in QUANTILE_METHODS:
        raise ValueError(f"unknown quantile calibration {calibration.quantile_method!r}")
    if calibration.quantile_method == "scaled" and adjust is not None and typical is None:
        raise ValueError("quantile shifts per unit of a window's scale need the typical interval scale")


def _calibration_to_dict(c: Calibration) -> dict[str, Any]:
    return {
        "levels": list(c.levels),
        "widths": c.widths,
        "typical": c.typical,
        "season": c.season,
        "quantile_adjust": c.quantile_adjust,
        "quantile_method": c.quantile_method,
        "n_errors": c.n_errors,
        "unsupported": [[level, n] for level, n in c.unsupported],
    }


def _calibration_from_dict(raw: dict[str, Any], config: Config) -> Calibration:
    """A stored calibration (a format 7 or 8 file's may also name whose errors it used: its intervals hold; a
    file before format 14 widened each quantile pair, read as the same shifts of each quantile)."""
    stored = raw.get("quantile_method")  # none before format 14; "each" was format 14's name for "levels"
    adjust, method = raw["quantile_adjust"], {None: "pairs", "each": "levels"}.get(stored, str(stored))
    if adjust is not None and method == "pairs":  # before format 14: each pair's widening
        pairs = quantile_pairs(config.train.quantiles)
        if not isinstance(adjust, torch.Tensor) or adjust.dim() != 3 or adjust.shape[0] != len(pairs):
            raise ValueError(f"quantile adjustments must be (pairs, horizon, columns) for the pairs {pairs}")
        adjust = pair_shifts(adjust, pairs, len(config.train.quantiles))
    elif adjust is not None and method == "levels":  # format 14: one shift per level, for every window
        if not isinstance(adjust, torch.Tensor) or adjust.dim() != 3:
            raise ValueError("quantile shifts must be (quantiles, horizon, columns)")
        adjust = adjust.expand(QUANTILE_GROUPS, *adjust.shape).clone()
    return Calibration(
        levels=tuple(float(level) for level in raw["levels"]),
        widths=raw["widths"],
        typical=raw["typical"],
        season=int(raw["season"]),
        quantile_adjust=adjust,
        quantile_method=method,
        n_errors=int(raw["n_errors"]),
        unsupported=tuple((float(level), int(n)) for level, n in raw["unsupported"]),
    )


def _table_to_dict(table: pd.DataFrame) -> dict[str, Any]:
    """A static table as plain lists (weights_only loading takes no DataFrame): numbers as floats, the rest text."""
    return {
        "columns": list(table.columns),
        "numeric": [table[c].dtype.kind == "f" for c in table.columns],
        "values": [[float(v) if table[c].dtype.kind == "f" else str(v) for v in table[c]] for c in table.columns],
    }


def _table_from_dict(raw: dict[str, Any]) -> pd.DataFrame:
    columns = {
        name: np.asarray(values, dtype=np.float64) if numeric else np.asarray(values, dtype=object)
        for name, numeric, values in zip(raw["columns"], raw["numeric"], raw["values"], strict=True)
    }
    return pd.DataFrame(columns, columns=list(raw["columns"]))


def _load_failure(exc: Exception) -> str:
    """One line on why torch.load failed, without torch's advice to retry with weights_only=False."""
    text = str(exc).strip()
    if "Weights only load failed" in text:
        lines = [line for line in text.splitlines()[1:] if line.strip() and not line.startswith(("Please", "Check"))]
        detail = lines[-1].strip() if lines else "not plain data"
        return f"refused to unpickle it, {detail[:120]}"
    return text.splitlines()[0][:160] if text else type(exc).__name__
