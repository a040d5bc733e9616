"""Covariates: calendar features, known-future and past-only columns, what each token may read, --future."""

from __future__ import annotations

import dataclasses
import importlib
import io

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import TINY_FLAGS, TINY_SIZE_FLAGS, layout_of, tiny_config
from test_cli_errors import assert_error, invoke

from tsformer.data import training_data
from tsformer.data.calendar import calendar_features, calendar_names
from tsformer.leakage import check_model, check_windows
from tsformer.model import Covariates, Forecaster
from tsformer.model import covariates as covariates_module
from tsformer.predictor import load_predictor
from tsformer.runs import predict_run
from tsformer.train import train

HORIZON = 4


def test_calendar_features_are_the_phase_of_each_cycle():
    assert calendar_names("h") == ("day_sin", "day_cos", "week_sin", "week_cos")
    assert calendar_names("D") == ("week_sin", "week_cos", "year_sin", "year_cos")
    assert calendar_names("W-SUN") == ("year_sin", "year_cos") and calendar_names("MS") == ("month_sin", "month_cos")
    assert calendar_names("YS") == ()
    stamps = pd.DatetimeIndex(["2024-01-01 06:00", "2024-01-03 18:00"])  # a Monday 06:00, a Wednesday 18:00
    features = calendar_features(stamps, "h")
    np.testing.assert_allclose(features[0, :2], [1.0, 0.0], atol=1e-6)  # a quarter of the day
    np.testing.assert_allclose(features[1, :2], [-1.0, 0.0], atol=1e-6)  # three quarters
    week = 2 * np.pi * (2 + 18 / 24) / 7  # Wednesday is day 2 of the week
    np.testing.assert_allclose(features[1, 2:], [np.sin(week), np.cos(week)], atol=1e-6)


def covariate_frame(n_per_series: int = 120, seed: int = 0) -> pd.DataFrame:
    """Two series whose target follows a known-future driver (y = 3 x + small noise) and carries a
    past-only covariate (yesterday's y)."""
    rng = np.random.default_rng(seed)
    parts = []
    for k, uid in enumerate(("A", "B")):
        x = rng.normal(size=n_per_series)
        y = 3 * x + 10 * (k + 1) + 0.05 * rng.normal(size=n_per_series)
        stamps = pd.date_range("2024-01-01", periods=n_per_series, freq="h").strftime("%Y-%m-%d %H:%M:%S")
        lagged = np.concatenate([[y[0]], y[:-1]])
        parts.append(pd.DataFrame({"unique_id": uid, "ds": stamps, "y": y, "load": x, "seen": lagged}))
    return pd.concat(parts, ignore_index=True)


@pytest.fixture
def covariate_csv(tmp_path):
    path = tmp_path / "covariates.csv"
    covariate_frame().to_csv(path, index=False)
    return path


def covariate_config(csv, **data):
    cfg = tiny_config(csv)
    data = {"future_covs": ("load",), "past_covs": ("seen",), **data}
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, **data))


def test_windows_carry_past_covariates_before_the_origin_and_future_ones_to_the_horizon(covariate_csv):
    data = training_data(covariate_config(covariate_csv))
    assert data.layout.past == ("seen",) and data.layout.known_future == ("load", *calendar_names("h"))
    windows = data.split_windows("test").split(16)
    past, future = windows.covariates.past, windows.covariates.future
    assert past.shape == (2, 16, 1) and future.shape == (2, 16 + HORIZON, 5)
    assert windows.covariates.phase is None and windows.covariates.static_values is None
    frame = data.frame
    for i in range(2):  # the last 4 rows of each series are its test targets
        rows = frame.rows_of(i)
        load = frame.future[rows, 0][-20:]
        mean, std = data.scaler.mean[i, 2], data.scaler.std[i, 2]  # inputs: y, seen, load
        np.testing.assert_allclose(future[i, :, 0].numpy() * std + mean, load, rtol=1e-5)
    assert all(r.passed for r in check_windows(data))


def test_a_window_handing_past_covariates_over_the_origin_fails_the_data_check(covariate_csv, monkeypatch):
    data = training_data(covariate_config(covariate_csv))
    module = importlib.import_module("tsformer.data.windows")
    real_split = module.Windows.split

    def past_to_the_end(self, context_len):
        split = real_split(self, context_len)
        leaked = self.past[:, -context_len:]  # past-only covariates shifted by the horizon
        return split._replace(covariates=split.covariates._replace(past=leaked))

    monkeypatch.setattr(module.Windows, "split", past_to_the_end)
    results = {r.name: r for r in check_windows(data)}
    assert (
        not results["data/window"].passed and "covariate cells read after the origin" in results["data/window"].detail
    )


def covariate_model(n_past: int = 1, n_future: int = 2) -> Forecaster:
    cfg = tiny_config().model
    return Forecaster(cfg, layout_of(1, n_past, n_future))


def test_the_model_checks_pass_with_covariates_and_state_the_future_allowance():
    results = {r.name: r for r in check_model(covariate_model())}
    assert all(r.passed for r in results.values()), [r.line() for r in results.values() if not r.passed]
    assert "known-future covariates in (t, t + 4]" in results["model/covariates"].detail


def test_a_model_reading_past_only_covariates_ahead_fails(monkeypatch):
    real = covariates_module.CovariateEmbedding.forward

    def one_patch_ahead(self, covariates, pad_len, n_tokens):
        past = torch.roll(covariates.past, shifts=-self.patch_len, dims=1)  # token k reads patch k + 1
        return real(self, Covariates(past, covariates.future), pad_len, n_tokens)

    monkeypatch.setattr(covariates_module.CovariateEmbedding, "forward", one_patch_ahead)
    results = {r.name: r for r in check_model(covariate_model())}
    assert not results["model/forward"].passed and not results["model/gradient"].passed


def test_a_model_reading_known_future_covariates_past_the_horizon_fails(monkeypatch):
    real = covariates_module.future_windows

    def two_horizons(future, pad_len, patch_len, horizon):
        shifted = torch.roll(future, shifts=-horizon, dims=1)  # the horizon after the one forecast
        return real(shifted, pad_len, patch_len, horizon)

    monkeypatch.setattr(covariates_module, "future_windows", two_horizons)
    results = {r.name: r for r in check_model(covariate_model(n_past=0))}
    assert not results["model/forward"].passed


def test_a_known_future_driver_is_learnt_and_used_at_predict(covariate_csv, tmp_path):
    """y = 3 x + level: with x as a known-future covariate the forecast follows x; without, it cannot."""
    frame = covariate_frame()
    errors = {}
    for name, data in (("with", {}), ("without", {"future_covs": (), "past_covs": ()})):
        cfg = covariate_config(covariate_csv, calendar=False, **data)
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, epochs=30, lr=0.01, fallback=False))
        run = tmp_path / name
        train(cfg, run, show_progress=False)
        history = frame.groupby("unique_id", sort=False).head(-HORIZON)
        future = frame.groupby("unique_id", sort=False).tail(HORIZON)
        history.to_csv(tmp_path / "history.csv", index=False)
        future.drop(columns=["y", "seen"]).to_csv(tmp_path / "future.csv", index=False)
        forecast = predict_run(run, tmp_path / "history.csv", future=tmp_path / "future.csv" if not data else None)
        errors[name] = float(np.mean((forecast.frame["y"].to_numpy() - future["y"].to_numpy()) ** 2))
    assert errors["with"] < 0.25 * errors["without"], errors  # x's variance is 9 of y's


def test_predict_needs_the_future_rows_of_every_series(covariate_csv, tmp_path):
    run = tmp_path / "run"
    train(covariate_config(covariate_csv), run, show_progress=False)
    frame = covariate_frame()
    future = frame.groupby("unique_id", sort=False).tail(HORIZON).drop(columns=["y", "seen"])
    history = frame.groupby("unique_id", sort=False).head(-HORIZON)
    history.to_csv(tmp_path / "history.csv", index=False)
    cases = {
        "none": (None, ("--future CSV", "load")),
        "short": (future.iloc[1:], ("has 3 rows", "series 'A'", "needs the 4 steps from")),
        "missing-series": (future[future.unique_id == "A"], ("no rows for series 'B'",)),
        "missing-column": (future.drop(columns=["load"]), ("covariate 'load' not in",)),
        "text-cell": (
            future.assign(load=future["load"].astype(object).where(np.arange(len(future)) != 2, "yes")),
            (
                "column 'load' is not numeric: 'yes' at line 4",
                "a missing value is an empty cell or NA, or correct it there",
            ),
        ),
        "offsets": (
            future.assign(ds=future["ds"] + "+00:00"),
            ("writes its timestamps with UTC offsets and the data",),
        ),
        "ids-written-otherwise": (
            future.assign(unique_id=future["unique_id"] + ".0"),
            (
                "no rows for 2 series ('A', 'B') (it holds 2 series ('A.0', 'B.0') that the data does not: are the ids "
                "written alike?); give each its next 4 steps (series 'A' from",
            ),
        ),
        "empty-cell": (
            future.assign(load=future["load"].where(np.arange(len(future)) != 5)),  # series B's second step
            ("misses covariate values for series 'B', 1 of 4", f"load at {future['ds'].iloc[5]}"),
        ),
    }
    for name, (table, fragments) in cases.items():
        args = ["predict", run, tmp_path / "history.csv"]
        if table is not None:
            table.to_csv(tmp_path / f"{name}.csv", index=False)
            args += ["--future", tmp_path / f"{name}.csv"]
        assert_error(invoke(*args), *fragments)
    future.to_csv(tmp_path / "good.csv", index=False)
    result = invoke("predict", run, tmp_path / "history.csv", "--future", tmp_path / "good.csv")
    assert result.exit_code == 0, result.output
    early = history.drop(index=history.index[history.unique_id == "B"][-3:])  # B no longer sold
    early.to_csv(tmp_path / "early.csv", index=False)
    future[future.unique_id == "A"].to_csv(tmp_path / "a-only.csv", index=False)
    ended = invoke("predict", run, tmp_path / "early.csv", "--future", tmp_path / "a-only.csv")
    assert ended.exit_code == 0, ended.output  # B, no longer sold, is left out: its forecast would lie in the past
    assert set(pd.read_csv(io.StringIO(ended.stdout))["unique_id"]) == {"A"}
    assert (
        "a-only.csv: left out of the forecast (give their next 4 steps there to forecast them)" in ended.stderr
        and "1 series ('B') end before the data's last time and have no rows in --future" in ended.stderr
    )
    pd.concat([future, future[future.unique_id == "A"].assign(unique_id="Z")]).to_csv(
        tmp_path / "extra.csv", index=False
    )
    extra = invoke("predict", run, tmp_path / "history.csv", "--future", tmp_path / "extra.csv")
    assert extra.exit_code == 0 and extra.stdout == result.stdout, extra.output
    assert "extra.csv holds 1 series ('Z') that the data does not; their rows are not read" in extra.stderr
    whole = frame.drop(columns=["y", "seen"])  # the covariate's whole timeline: history, then the horizon
    whole.to_csv(tmp_path / "whole.csv", index=False)
    from_whole = invoke("predict", run, tmp_path / "history.csv", "--future", tmp_path / "whole.csv")
    assert from_whole.exit_code == 0 and from_whole.stdout == result.stdout, from_whole.output
    future.iloc[::-1].to_csv(tmp_path / "reversed.csv", index=False)  # rows in any order, as the history's
    reversed_rows = invoke("predict", run, tmp_path / "history.csv", "--future", tmp_path / "reversed.csv")
    assert reversed_rows.exit_code == 0 and reversed_rows.stdout == result.stdout, reversed_rows.output
    # the long-file habit: each series' rows ahead in the history itself, covariates and no target
    frame.assign(y=frame["y"].where(~frame.index.isin(future.index))).to_csv(tmp_path / "ahead.csv", index=False)
    in_file = invoke("predict", run, tmp_path / "ahead.csv")
    assert in_file.exit_code == 0 and in_file.stdout == result.stdout, in_file.output
    assert "known-future covariates of the steps ahead were read from the data's rows after" in in_file.stderr
    short = frame.drop(index=future.index[-1])  # B's last row ahead missing: 3 of its 4 steps
    short.assign(y=short["y"].where(~short.index.isin(future.index))).to_csv(tmp_path / "short.csv", index=False)
    assert_error(invoke("predict", run, tmp_path / "short.csv"), "--future CSV", "or end each series with 4 rows")


def test_the_cli_takes_covariates_and_a_non_numeric_one_is_an_error(covariate_csv, tmp_path):
    run = tmp_path / "run"
    result = invoke("train", covariate_csv, "--out", run, "--future-cov", "load", "--past-cov", "seen", *TINY_FLAGS)
    assert result.exit_code == 0, result.output
    ckpt = load_predictor(run / "model.pt")
    assert (
        ckpt.layout.past == ("seen",)
        and ckpt.layout.future == ("load",)
        and ckpt.layout.calendar == calendar_names("h")
    )
    check = invoke("check", run)
    assert check.exit_code == 0 and "model/covariates" in check.stdout, check.output
    bad = covariate_frame().assign(load="high")
    bad.to_csv(tmp_path / "bad.csv", index=False)
    assert_error(
        invoke("train", tmp_path / "bad.csv", "--out", tmp_path / "bad_run", "--future-cov", "load", *TINY_FLAGS),
        "covariate 'load' is not numeric",
        "static covariate",
        left_behind=(tmp_path / "bad_run",),
    )
    assert_error(invoke("train", covariate_csv, "--future-cov", "price", *TINY_FLAGS), "covariate 'price' not in")
    plain = ["--out", tmp_path / "plain", "--no-calendar", *TINY_SIZE_FLAGS, "--set", "train.loss=mse"]
    result = invoke("train", covariate_csv, *plain)
    assert result.exit_code == 0 and load_predictor(tmp_path / "plain" / "model.pt").layout.calendar == ()


def test_a_wide_file_with_two_targets_and_a_covariate_evaluates_and_predicts(tmp_path):
    """The scaler holds the covariate's statistics beside the targets'; metrics use the targets' only."""
    from helpers import make_frame, write_csv

    from tsformer.runs import evaluate_run

    frame = make_frame()
    frame["driver"] = np.random.default_rng(0).normal(size=len(frame))
    csv = write_csv(tmp_path / "wide.csv", frame)
    cfg = tiny_config(csv)
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, targets=("a", "b"), past_covs=("driver",)))
    train(cfg, tmp_path / "run", show_progress=False)
    assert load_predictor(tmp_path / "run" / "model.pt").scaler.mean.shape == (1, 3)
    report = evaluate_run(tmp_path / "run", write=False)
    assert set(report.scores["model"]["per_column"]) == {"a", "b"}
    frame["id"] = 7  # a column named like an id: a wide model does not read it as one at predict
    forecast = predict_run(tmp_path / "run", write_csv(tmp_path / "with_id.csv", frame)).frame
    assert list(forecast.columns[:2]) == ["date", "a"] and len(forecast) == HORIZON


@pytest.mark.parametrize("role", ["future_covs", "past_covs"])
def test_the_long_formats_target_given_as_a_covariate_is_refused(covariate_csv, role):
    """Without --target, `y` as a covariate would leave the other numeric columns (load, seen) as the targets."""
    from tsformer.data import read_series
    from tsformer.errors import DataError

    cfg = covariate_config(covariate_csv, **{"future_covs": (), "past_covs": (), role: ("y",)})
    with pytest.raises(DataError, match=r"column 'y', the long format's target, is given as a covariate"):
        read_series(covariate_csv, cfg.data)
    named = dataclasses.replace(cfg.data, targets=("load",))  # a target named: y may be a covariate
    assert read_series(covariate_csv, named).columns == ("load",)
