"""The Python API: tsformer.fit on DataFrames, the Predictor's methods, save/load, and their agreement with the CLI."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import TINY_FLAGS, make_frame, write_csv
from test_cli_errors import invoke

import tsformer
from tsformer.candidates import BUILT_IN
from tsformer.config import load_config
from tsformer.data import StaticScale
from tsformer.errors import ConfigError, DataError
from tsformer.leakage import check_roles, check_static

TINY = {
    "model.context_len": 16,
    "model.patch_len": 4,
    "model.d_model": 8,
    "model.n_heads": 2,
    "model.d_ff": 16,
    "model.n_layers": 1,
    "train.epochs": 2,
    "train.batch_size": 32,
    "train.seed": 0,
    "data.calendar": True,  # the automatic settings given, as TINY_FLAGS give them
    "train.loss": "mse",
    "data.val_horizons": 1,
    "train.final_fit": False,
    "train.candidates": list(BUILT_IN),
    "model.members": 1,
}  # the model of TINY_FLAGS
HORIZON = 4


def panel(n_series: int = 4, n_rows: int = 120, seed: int = 0) -> pd.DataFrame:
    """unique_id, ds, y with a known-future `price` that drives y and a past-only `load`; a static `kind`
    (the sign of the daily cycle) and `size` (the level) beside them."""
    rng = np.random.default_rng(seed)
    parts = []
    for k in range(n_series):
        t = np.arange(n_rows)
        price = rng.normal(size=n_rows)
        kind = "up" if k % 2 else "down"
        y = (1 if kind == "up" else -1) * np.sin(2 * np.pi * t / 24) + 0.5 * price + k + 0.1 * rng.normal(size=n_rows)
        parts.append(
            pd.DataFrame({
                "unique_id": f"S{k}",
                "ds": pd.date_range("2024-01-01", periods=n_rows, freq="h").strftime("%Y-%m-%d %H:%M:%S"),
                "y": y.round(4),
                "price": price.round(4),
                "load": rng.normal(size=n_rows).round(4),
                "kind": kind,
                "size": float(k),
            })
        )  # fmt: skip
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def wide_fit():
    frame = make_frame()
    return frame, tsformer.fit(frame, horizon=HORIZON, config=TINY)


def test_fit_on_a_dataframe_equals_train_on_the_same_data_as_csv(tmp_path):
    frame = make_frame()
    csv = write_csv(tmp_path / "data.csv", frame)
    result = invoke("train", csv, "--out", tmp_path / "run", "--quiet", *TINY_FLAGS)
    assert result.exit_code == 0, result.output
    fitted = tsformer.fit(frame, horizon=HORIZON, config=TINY)
    trained = tsformer.load(tmp_path / "run")
    assert fitted.config.model == trained.config.model and fitted.layout == trained.layout
    state, other = fitted.model.state_dict(), trained.model.state_dict()
    assert all(torch.equal(state[k], other[k]) for k in state)  # bit for bit on CPU
    assert fitted.fallback == trained.fallback and torch.equal(fitted.calibration.widths, trained.calibration.widths)
    pd.testing.assert_frame_equal(fitted.predict(frame), trained.predict(csv), check_exact=True)


def test_a_series_is_fit_as_the_one_column_table_of_its_time_index():
    frame = make_frame()
    series = frame.set_index("date")["a"]  # a notebook's series: values on a time index
    fitted = tsformer.fit(series, horizon=HORIZON, config=TINY)
    tabled = tsformer.fit(frame[["date", "a"]], horizon=HORIZON, config=TINY)
    assert fitted.layout.targets == ("a",)
    pd.testing.assert_frame_equal(fitted.predict(), tabled.predict(), check_exact=True)
    assert tsformer.fit(series.rename(None), horizon=HORIZON, config=TINY).layout.targets == ("y",)
    pd.testing.assert_frame_equal(fitted.predict(series), fitted.predict(), check_exact=True)  # a Series to predict
    pd.testing.assert_frame_equal(fitted.evaluate(series), fitted.evaluate())  # the data it was fit on, as a Series
    for wrong in (5, [1.0, 2.0], None.__class__):
        with pytest.raises(DataError, match=r"^data must be a DataFrame, a Series or a CSV path, got "):
            fitted.predict(wrong)
    with pytest.raises(DataError, match=r"^data must be a DataFrame, a Series or a CSV path, got int"):
        tsformer.fit(5, horizon=HORIZON, config=TINY)
    unnamed = frame.set_index(pd.DatetimeIndex(frame["date"]).rename(None))[["a"]]  # an index without a name
    forecast = tsformer.fit(unnamed, horizon=HORIZON, config=TINY).predict()
    assert list(forecast.columns[:2]) == ["date", "a"] and not any("time column" in n for n in forecast.attrs["notes"])
    as_before = tsformer.fit(unnamed, horizon=HORIZON, config={**TINY, "data.time_col": "index"})  # as runs had it
    assert as_before.time_col == "index" and list(as_before.predict(unnamed).columns[:2]) == ["index", "a"]


def test_fit_predict_save_load_equals_the_cli_forecast_of_the_same_run(wide_fit, tmp_path):
    frame, predictor = wide_fit
    forecast = predictor.predict()  # the data it was fit on
    assert list(forecast.columns[:2]) == ["date", "a"] and len(forecast) == HORIZON
    assert forecast["date"].iloc[0] == pd.Timestamp("2024-01-11 00:00")  # the hour after the last row
    assert {"a_lower_80", "a_upper_80", "b_lower_95", "b_upper_95"} <= set(forecast.columns)
    run = predictor.save(tmp_path / "saved")
    again = tsformer.load(run)
    pd.testing.assert_frame_equal(again.predict(frame), forecast, check_exact=True)
    csv = write_csv(tmp_path / "data.csv", frame)
    result = invoke("predict", run, csv, "--out", tmp_path / "cli.csv")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "cli.csv").read_text() == forecast.to_csv(index=False)  # the CLI writes the same table
    assert invoke("check", run, "--csv", csv).exit_code == 0  # a saved in-memory run is a run folder like any


def test_save_refuses_a_folder_in_the_way_and_replaces_a_run_whole(wide_fit, tmp_path):
    _, predictor = wide_fit
    run = predictor.save(tmp_path / "run")
    (run / "last.pt").write_bytes(b"an older run's resumable epoch")
    with pytest.raises(ConfigError, match="already exists and is not empty") as refused:
        predictor.save(run)
    assert "overwrite=True" in str(refused.value) and "resume" not in str(refused.value)  # save cannot resume
    assert str(refused.value).endswith("or choose another path")  # save's argument, not fit's out=
    assert (run / "last.pt").exists()  # refused: nothing touched
    assert predictor.save(run, overwrite=True) == run
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml", "model.pt"]  # no file of the old run left
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not a tsformer run folder.*choose another path$"):
        predictor.save(tmp_path / "notes", overwrite=True)
    assert (tmp_path / "notes" / "todo.txt").read_text() == "mine"


def test_evaluate_backtest_and_check_return_dataframes(wide_fit):
    frame, predictor = wide_fit
    report = predictor.evaluate()
    fell_back = int((predictor.predict()[["a_forecaster", "b_forecaster"]] != "model").any(axis=None))
    candidates = ["repeat_last", "seasonal_naive", "drift", "seasonal_drift"]  # hourly; the context is under a week
    assert list(report["forecaster"]) == ["model", *["model_alone"] * fell_back, *candidates]
    assert {"mse", "mae", "mase", "smape", "coverage_80", "width_80", "msis_95"} <= set(report.columns)
    assert np.isfinite(report.loc[0, "mse"]) and 0 <= report.loc[0, "coverage_80"] <= 1
    from tsformer.evaluate import evaluate

    naive = evaluate(predictor, predictor.read()).intervals["80"]["seasonal_naive"]  # as `tsformer evaluate` says
    row = report.set_index("forecaster").loc["seasonal_naive"]
    assert (row["coverage_80"], row["width_80"], row["msis_80"]) == (naive["coverage"], naive["width"], naive["msis"])
    validation = predictor.evaluate(split="val")
    assert validation.loc[0, "mse"] != report.loc[0, "mse"]
    backtest = predictor.backtest(windows=3, step=4)
    assert len(backtest) == 3 * HORIZON * 2 and {"origin", "date", "target", "forecast", "truth"} <= set(backtest)
    assert report.attrs["notes"] == []  # nothing left out here
    shipped_by = [note for note in backtest.attrs["notes"] if note.startswith("forecast by a classical candidate")]
    assert len(backtest.attrs["notes"]) == len(shipped_by) == fell_back  # what ships where it is not the model
    every = predictor.backtest(step=4)  # as many origins as fit, which a note counts
    assert every.attrs["notes"] == [
        f"{every.origin.nunique()} origins, 4 steps apart: all that fit after the run's validation split (windows=N "
        "for fewer)",
        *shipped_by,
    ]
    checks = predictor.check()
    assert checks["passed"].all() and "data/window" in set(checks["name"]) and "model/forward" in set(checks["name"])


def test_evaluate_says_which_rows_it_did_not_score_and_refuses_a_split_it_has_none_of(wide_fit):
    frame, predictor = wide_fit
    later = pd.concat([frame, make_frame(len(frame) + 30).iloc[len(frame) :]])  # the same rows, and 30 hours more
    report = predictor.evaluate(later)
    pd.testing.assert_frame_equal(report, predictor.evaluate(), check_like=True)  # the run's own test split
    assert report.attrs["notes"] == [
        "30 rows after the test split are not scored (evaluate scores the run's own split; backtest on this data "
        "forecasts over them)"
    ]
    with pytest.raises(ConfigError, match="^split= must be test or val, got 'bogus'"):
        predictor.evaluate(split="bogus")


def test_long_format_with_covariates_quantiles_and_intervals_from_python():
    data = panel(n_series=20)  # 20 validation windows: enough for a 95 % interval
    history = data.groupby("unique_id", sort=False).head(-HORIZON)
    future = data.groupby("unique_id", sort=False).tail(HORIZON)[["unique_id", "ds", "price"]]
    predictor = tsformer.fit(
        history[["unique_id", "ds", "y", "price", "load"]],
        horizon=HORIZON,
        future_covs=["price"],
        past_covs=["load"],
        config={**TINY, "train.quantiles": [0.1, 0.5, 0.9]},
    )
    assert predictor.layout.future == ("price",) and predictor.layout.past == ("load",)
    forecast = predictor.predict(future=future)
    assert list(forecast.columns[:3]) == ["unique_id", "ds", "y"] and len(forecast) == 20 * HORIZON
    assert {"y_q0.1", "y_q0.5", "y_q0.9", "y_lower_80", "y_upper_95"} <= set(forecast.columns)
    assert (forecast["y_q0.1"] <= forecast["y_q0.9"]).all() and (forecast["y_lower_95"] <= forecast["y_lower_80"]).all()
    joined = forecast.assign(ds=forecast["ds"].dt.strftime("%Y-%m-%d %H:%M:%S")).merge(future, on=["unique_id", "ds"])
    assert len(joined) == len(forecast)  # the forecast steps are the future rows
    with pytest.raises(DataError, match="known-future covariates price"):
        predictor.predict()  # without the future values
    assert predictor.check()["passed"].all()


def test_static_covariates_numeric_and_categorical_from_a_table_or_the_data():
    data = panel()
    static = data.groupby("unique_id", as_index=False).first()[["unique_id", "kind", "size"]]
    model_only = {**TINY, "train.fallback": False}  # the model's own forecast ships, so it shows what it reads
    from_table = tsformer.fit(data[["unique_id", "ds", "y"]], horizon=HORIZON, static_df=static, config=model_only)
    layout = from_table.layout
    assert layout.static_numeric == ("size",) and layout.static_categorical == (("kind", ("down", "up")),)
    checks = from_table.check().set_index("name")
    assert checks["passed"].all() and checks.loc["model/static", "max_change"] > 0  # it reads them, as allowed
    from_data = tsformer.fit(data, horizon=HORIZON, static_covs=["kind", "size"], config=model_only)
    assert from_data.layout == layout and from_data.layout.targets == ("y",)  # a static column is no target
    pd.testing.assert_frame_equal(
        from_data.predict(data[["unique_id", "ds", "y", "kind", "size"]]),
        from_table.predict(data[["unique_id", "ds", "y"]]),
    )  # the same values, from either place, give the same model and forecast
    blanks = data[["unique_id", "ds", "y", "kind", "size"]].copy()
    blanks.loc[blanks.groupby("unique_id").tail(3).index, ["kind", "size"]] = None  # each series' last rows blank
    pd.testing.assert_frame_equal(from_data.predict(blanks), from_table.predict(data[["unique_id", "ds", "y"]]))
    blanks.loc[blanks.groupby("unique_id").head(1).index, "kind"] = None  # a value written only in later rows
    with pytest.raises(DataError, match=r"static covariate 'kind' has no value in the first row of series 'S0'"):
        from_data.predict(blanks)
    other = static.assign(size=static["size"] + 3.0)
    moved = from_table.predict(data[["unique_id", "ds", "y"]], static_df=other)
    assert not np.allclose(moved["y"], from_table.predict()["y"])  # the forecast reads the static values
    refit = from_table.backtest(data[["unique_id", "ds", "y"]], windows=1, refit=True)  # the stored table, per fold
    swapped = static.assign(size=static["size"].to_numpy()[::-1])  # (a shift of all would standardise away)
    refit_other = from_table.backtest(data[["unique_id", "ds", "y"]], windows=1, refit=True, static_df=swapped)
    assert not np.allclose(refit["forecast"], refit_other["forecast"])  # each fold's model reads them
    given = from_table.backtest(data[["unique_id", "ds", "y"]], windows=1, refit=True, static_df=static)
    pd.testing.assert_frame_equal(refit, given)  # by default, the table it was fit with
    newcomer = data[data.unique_id == "S1"].assign(unique_id="W")[["unique_id", "ds", "y"]]
    odd = pd.DataFrame({"unique_id": ["W"], "kind": ["sideways"], "size": [2.0]})
    notes = from_table.predict(newcomer, static_df=odd).attrs["notes"]
    assert "1 series hold a static category training never saw ('W' has kind 'sideways', not among training's " \
           "down, up); the model reads it as an unknown category" in notes  # fmt: skip


def test_static_covariates_are_refused_when_they_vary_or_are_missing():
    data = panel()
    varying = data.copy()
    varying.loc[5, "size"] = 99.0  # series S0 changes size at row 5
    with pytest.raises(DataError, match=r"static covariate 'size' varies within series 'S0' .* at row 5"):
        tsformer.fit(varying, horizon=HORIZON, static_covs=["size"], config=TINY)
    static = data.groupby("unique_id", as_index=False).first()[["unique_id", "kind"]]
    with pytest.raises(DataError, match="has no row for series 'S3'"):
        tsformer.fit(data[["unique_id", "ds", "y"]], horizon=HORIZON, static_df=static.iloc[:3], config=TINY)
    with pytest.raises(DataError, match="two rows for series 'S0'"):
        tsformer.fit(data[["unique_id", "ds", "y"]], horizon=HORIZON, static_df=pd.concat([static, static]))
    with pytest.raises(DataError, match="describe each series of a long-format file"):
        tsformer.fit(make_frame(), horizon=HORIZON, static_covs=["a"], config=TINY)
    predictor = tsformer.fit(data[["unique_id", "ds", "y"]], horizon=HORIZON, static_df=static, config=TINY)
    new = data[data.unique_id == "S0"].assign(unique_id="S9")[["unique_id", "ds", "y"]]
    with pytest.raises(DataError, match="series 'S9' was not in training, so its static covariates"):
        predictor.predict(new)
    forecast = predictor.predict(new, static_df=pd.DataFrame({"unique_id": ["S9"], "kind": ["sideways"]}))
    assert len(forecast) == HORIZON  # an unseen category reads the unseen code


def test_a_series_that_starts_after_training_changes_no_static_role_scale_or_category(capfd):
    """A series whose rows all come after the training end (a product launched in the test months) set the static
    covariates' scale and the categories the model is built with: its size moved the held-out weights, its new
    kind added an embedding row. Its statics are now read with training's roles, scale and categories."""
    data = panel(n_rows=120)
    late = data[data.unique_id == "S3"].iloc[-20:]  # S3 exists only in the last 20 hours
    data = pd.concat([data[data.unique_id != "S3"], late])[["unique_id", "ds", "y"]]
    borders = {"data.split_borders": ["2024-01-04 00:00:00", "2024-01-05 00:00:00", "2024-01-06 00:00:00"]}
    config = {**TINY, **borders}

    def fitted(size: float, kind: str, notes: bool = False):
        static = pd.DataFrame({"unique_id": ["S0", "S1", "S2", "S3"], "size": [0.0, 1.0, 2.0, size],
                               "kind": ["down", "up", "down", kind]})  # fmt: skip
        return tsformer.fit(data, horizon=HORIZON, static_df=static, config=config, notes=notes)

    base = fitted(3.0, "up")
    assert base.borders.train_end.tolist() == [72, 72, 72, 0]
    assert base.layout.static_categorical == (("kind", ("down", "up")),)
    np.testing.assert_allclose(base.static_scale.mean, [1.0])  # S0-S2's sizes only
    capfd.readouterr()
    for other in (fitted(500.0, "up"), fitted(3.0, "sideways", notes=True)):
        assert other.layout == base.layout and np.array_equal(other.static_scale.mean, base.static_scale.mean)
        for mine, theirs in zip(base.model.parameters(), other.model.parameters(), strict=True):
            assert torch.equal(mine, theirs)
    assert "1 series hold a static category training never saw ('S3' has kind 'sideways'" in capfd.readouterr().err
    with pytest.raises(DataError, match="static covariate 'size' is numeric in the series training reads but holds"):
        fitted("big", "up")
    checks = base.check().set_index("name")
    assert checks["passed"].all() and "the 3 series that exist by the training end" in checks.loc["data/static"].detail
    prepared = base.read()
    every_series = StaticScale.fit(pd.DataFrame({"size": [0.0, 1.0, 2.0, 3.0]}), ("size",), np.ones(4, dtype=bool))
    assert not check_static(dataclasses.replace(prepared, static_scale=every_series)).passed
    with_later = dataclasses.replace(prepared.layout, static_categorical=(("kind", ("down", "sideways", "up")),))
    assert not check_static(dataclasses.replace(prepared, layout=with_later)).passed


def test_a_short_series_of_the_training_months_sets_static_roles_as_any_other():
    """A series too short for training rows of its own (a per-series split gives it none) still lives in the
    training months, so its statics count: a text grade makes the column categorical, as before the rule for
    series that start later; a non-finite value makes it categorical for the check too (it cried leak)."""
    data = panel(n_series=3, n_rows=60)[["unique_id", "ds", "y"]]
    data = pd.concat([data, data[data.unique_id == "S0"].iloc[:6].assign(unique_id="S3")])
    for grades, categories in ((["1", "2", "3", "A"], ("1", "2", "3", "A")), ([1.0, np.inf, 3.0, 4.0], None)):
        static = pd.DataFrame({"unique_id": ["S0", "S1", "S2", "S3"], "grade": grades})
        predictor = tsformer.fit(data, horizon=HORIZON, static_df=static, config=TINY)
        assert predictor.borders.train_end[3] == 0
        found = dict(predictor.layout.static_categorical)["grade"]
        assert found == (categories or ("1.0", "3.0", "4.0", "inf")) and check_static(predictor.read()).passed


def test_a_series_predicted_alone_keeps_its_category_when_its_value_reads_as_a_number():
    """A categorical static column holds '007' and '1.50' beside text; predicting one series alone, its table held
    only numbers, so '007' read as 7: a category training never saw, and another forecast."""
    data = panel()
    static = pd.DataFrame({"unique_id": ["S0", "S1", "S2", "S3"], "grade": ["007", "x", "1.50", "x"]})
    config = {**TINY, "train.fallback": False}  # the model ships, so the forecast shows what it reads
    predictor = tsformer.fit(data[["unique_id", "ds", "y"]], horizon=HORIZON, static_df=static, config=config)
    assert predictor.layout.static_categorical == (("grade", ("007", "1.50", "x")),)
    whole = predictor.predict(data[["unique_id", "ds", "y"]])
    for k, series in ((0, "S0"), (2, "S2")):
        alone = predictor.predict(data[data.unique_id == series][["unique_id", "ds", "y"]], static_df=static.iloc[[k]])
        assert "never saw" not in " ".join(alone.attrs["notes"])
        pd.testing.assert_frame_equal(
            alone.reset_index(drop=True), whole[whole.unique_id == series].reset_index(drop=True)
        )


def test_a_covariate_read_in_another_role_than_declared_is_caught():
    data = panel()
    predictor = tsformer.fit(data, horizon=HORIZON, future_covs=["price"], past_covs=["load"], config=TINY)
    prepared = predictor.read()
    assert check_roles(prepared, predictor.config).passed
    swapped = dataclasses.replace(prepared.layout, past=(), future=("price", "load"))  # load's horizon values read
    result = check_roles(dataclasses.replace(prepared, layout=swapped), predictor.config)
    assert not result.passed and "known-future ['price', 'load']" in result.detail


def test_the_cli_takes_static_covariates(tmp_path):
    data = panel()
    csv = write_csv(tmp_path / "panel.csv", data[["unique_id", "ds", "y", "kind"]])
    static = write_csv(
        tmp_path / "static.csv", data.groupby("unique_id", as_index=False).first()[["unique_id", "size"]]
    )
    result = invoke("train", csv, "--out", tmp_path / "run", "--quiet", "--static", static, *TINY_FLAGS)
    assert result.exit_code == 0, result.output
    assert tsformer.load(tmp_path / "run").layout.static == ("size",)
    result = invoke("train", csv, "--out", tmp_path / "own", "--quiet", "--static-cov", "kind", *TINY_FLAGS)
    assert result.exit_code == 0, result.output
    assert tsformer.load(tmp_path / "own").layout.static == ("kind",)
    assert invoke("predict", tmp_path / "own", csv).exit_code == 0
    checked = invoke("check", tmp_path / "own")
    assert checked.exit_code == 0 and "PASS  model/static" in checked.stdout


def test_config_as_dotted_keys_sections_yaml_or_a_config(tmp_path):
    yaml_path = tmp_path / "c.yaml"
    yaml_path.write_text("train:\n  epochs: 1\nmodel:\n  d_model: 8\n  n_heads: 2\n")
    from tsformer.api import _config

    assert _config({"train.epochs": 1, "model": {"d_model": 8, "n_heads": 2}}) == load_config(yaml_path)
    assert _config(load_config(yaml_path)) == _config(str(yaml_path))
    with pytest.raises(ConfigError, match="unknown key train.epoch; valid keys"):
        tsformer.fit(make_frame(), config={"train.epoch": 1})
    with pytest.raises(ConfigError, match="must be section.key"):
        tsformer.fit(make_frame(), config={"epochs": 1})


def test_a_dataframes_problems_name_its_rows():
    frame = make_frame(50)
    frame.loc[7, "date"] = frame.loc[6, "date"]
    with pytest.raises(DataError, match=r"duplicate timestamp .* at rows 6 and 7; keep one row per timestamp"):
        tsformer.fit(frame, config=TINY)
    indexed = make_frame().set_index("date")  # a time index, as notebooks keep it
    indexed.index = pd.to_datetime(indexed.index)
    assert tsformer.fit(indexed, horizon=HORIZON, config=TINY).layout.targets == ("a", "b")


def test_the_public_names_are_documented():
    for name in tsformer.__all__:
        if name == "__version__":
            continue
        value = getattr(tsformer, name)
        assert inspect.getdoc(value), f"tsformer.{name} has no docstring"
    for method in ("predict", "evaluate", "backtest", "check", "save", "forecast"):
        assert inspect.getdoc(getattr(tsformer.Predictor, method)), method
    assert "static_df" in inspect.getdoc(tsformer.fit) and "dotted keys" in inspect.getdoc(tsformer.fit)


def test_static_covariates_from_another_series_fail_the_window_check(monkeypatch):
    from tsformer.data import training_data, windows
    from tsformer.leakage import check_windows

    data = panel()
    cfg = tsformer.api._config({**TINY, "model.horizon": HORIZON})
    static = data.groupby("unique_id", as_index=False).first()[["unique_id", "kind", "size"]]
    prepared = training_data(cfg, data[["unique_id", "ds", "y"]], static)
    assert all(r.passed for r in check_windows(prepared))
    real = windows.SeriesInputs._static

    def the_previous_windows(self, floors, device):  # each window gets the static values of the window before
        return {role: values.roll(1, 0) for role, values in real(self, floors, device).items()}

    monkeypatch.setattr(windows.SeriesInputs, "_static", the_previous_windows)
    results = {r.name: r for r in check_windows(prepared)}
    assert not results["data/splits"].passed and "outside their split or series" in results["data/splits"].detail


def test_the_static_check_fails_on_a_model_that_ignores_them(monkeypatch):
    from helpers import layout_of, tiny_config

    from tsformer.leakage import check_model
    from tsformer.model import Forecaster
    from tsformer.model import covariates as covariates_module

    layout = layout_of(2, static_numeric=("size",), static_categorical=(("kind", ("a", "b")),))
    model = Forecaster(tiny_config().model, layout)
    assert {r.name: r.passed for r in check_model(model)}["model/static"]
    monkeypatch.setattr(covariates_module.StaticEmbedding, "forward", lambda self, values, codes: 0 * values[:, :1])
    assert not {r.name: r.passed for r in check_model(model)}["model/static"]


def test_fit_keeps_the_callers_torch_threads_and_random_stream_and_prints_nothing_by_default(tmp_path, capfd):
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.manual_seed(7)
        expected = torch.rand(3)
        torch.manual_seed(7)
        config = {**TINY, "train.num_threads": 1}  # for the run only
        config = {key: value for key, value in config.items() if key not in ("model.context_len", "model.patch_len")}
        tsformer.fit(make_frame(), horizon=HORIZON, config=config, out=tmp_path / "run")
        assert torch.get_num_threads() == 2 and torch.equal(torch.rand(3), expected)
        assert capfd.readouterr().err == ""  # progress=False: nothing printed, a run folder or not
        tsformer.fit(make_frame(), horizon=HORIZON, config=config, notes=True)
        notes = capfd.readouterr().err
        assert notes.startswith("context_len 72 and patch_len 24 chosen for 168 training rows")
        assert 'config={"model.patch_len": N}' in notes and "--" not in notes  # Python's spelling, not the CLI's
    finally:
        torch.set_num_threads(threads)


def test_ids_keep_their_dtype_and_backtest_times_are_timestamps():
    data = panel(n_series=3)[["unique_id", "ds", "y"]]
    data["unique_id"] = data["unique_id"].str[1:].astype(np.int64) * 10  # 0, 10, 20
    predictor = tsformer.fit(data, horizon=HORIZON, config=TINY)
    forecast = predictor.predict()
    assert forecast["unique_id"].dtype == np.int64 and forecast["unique_id"].unique().tolist() == [0, 10, 20]
    assert len(forecast.merge(data[["unique_id"]].drop_duplicates(), on="unique_id")) == len(forecast)
    back = predictor.backtest(windows=1)
    assert back["unique_id"].dtype == np.int64 and back["unique_id"].unique().tolist() == [0, 10, 20]
    assert back["ds"].dtype.kind == "M" and back["origin"].dtype.kind == "M"  # timestamps, as predict gives
    assert (back["ds"] > back["origin"]).all()
    categorical = data.assign(unique_id=data["unique_id"].astype("category"))
    again = predictor.predict(categorical)["unique_id"]
    assert isinstance(again.dtype, pd.CategoricalDtype) and again.unique().tolist() == [0, 10, 20]


def test_backtest_from_python_checks_its_options_reads_a_plain_start_in_the_datas_zone_and_refits(wide_fit):
    frame, predictor = wide_fit
    with pytest.raises(ConfigError, match=r"^windows= must be at least 1, got 0$"):
        predictor.backtest(windows=0)
    with pytest.raises(ConfigError, match=r"^step= must be 0 \(the horizon\) or more, got -1$"):
        predictor.backtest(step=-1)
    berlin = frame.assign(date=pd.to_datetime(frame["date"]).dt.tz_localize("Europe/Berlin"))
    zoned = tsformer.fit(berlin, horizon=HORIZON, config=TINY)
    back = zoned.backtest(start="2024-01-10 12:00", windows=2)  # a plain time, read in Berlin's
    assert back["date"].iloc[0] == pd.Timestamp("2024-01-10 12:00", tz="Europe/Berlin")
    assert zoned.backtest(start="2024-01-10 12:00", windows=2, step=None).equals(back)  # None: the horizon, as 0
    refit = predictor.backtest(windows=2, step=8, refit=True)  # a model trained at each origin
    assert refit["origin"].nunique() == 2 and len(refit) == 2 * HORIZON * 2
    assert refit.attrs["notes"][0].startswith("fold 1: trained on rows 0..")


def test_a_refit_folds_forecast_reads_no_row_after_its_window():
    """A refit fold trains from the config as given, so every automatic setting is chosen on the rows before its
    origin: rows after the fold's window redrawn leave its forecasts and bounds exactly as they were. Here the
    whole file's validation days (a weekend's end) choose the calendar and the redrawn ones do not, so folds that
    reused the settings chosen on the whole file moved."""
    frame = make_frame(480)
    weekend = (pd.to_datetime(frame["date"]).dt.day_of_week >= 5).to_numpy()
    frame[["a", "b"]] = frame[["a", "b"]].to_numpy() + 3.0 * weekend[:, None]
    config = {key: value for key, value in TINY.items() if key not in ("data.calendar", "train.loss")}
    predictor = tsformer.fit(frame, horizon=HORIZON, config={**config, "train.fallback": False})  # the model ships
    assert predictor.config.data.calendar
    later = frame.copy()
    rng = np.random.default_rng(1)
    later.loc[304:, ["a", "b"]] = (10 * rng.normal(size=(len(frame) - 304, 2))).round(4)  # after rows 300..303
    folds = [predictor.backtest(data, windows=1, start=frame["date"].iloc[300], refit=True) for data in (frame, later)]
    assert folds[0]["origin"].nunique() == 1 and len(folds[0]) == 2 * HORIZON
    pd.testing.assert_frame_equal(folds[0], folds[1])


def test_a_refit_fold_of_a_date_split_keeps_the_runs_validation_length_when_a_series_starts_late():
    """The fold's validation length under date borders was the shortest series' stretch: a series starting inside
    the test split gave 0, and the refit was refused for a horizon it already had."""
    data = panel(n_series=3, n_rows=200)[["unique_id", "ds", "y"]]
    late = data[data.unique_id == "S2"].iloc[180:]  # S2 starts in the test split
    data = pd.concat([data[data.unique_id != "S2"], late])
    borders = ["2024-01-06 00:00:00", "2024-01-07 12:00:00", "2024-01-09 08:00:00"]
    predictor = tsformer.fit(data, horizon=HORIZON, config={**TINY, "data.split_borders": borders})
    assert predictor.borders.val_end.tolist() == [156, 156, 0]  # 36 validation hours for S0 and S1
    folds = predictor.backtest(windows=1, refit=True)
    assert folds["origin"].nunique() == 1  # 36 validation hours before it, as the run's
    assert folds.attrs["notes"][0] == (
        "fold 1: trained on the steps before 2024-01-07 16:00:00, validated on those before 2024-01-09 04:00:00"
    )
    checks = predictor.check().set_index("name")  # the origin checks probe the series that have a test window
    assert checks["passed"].all() and not checks.loc[["backtest/origin", "predict/origin"], "skipped"].any()
    assert checks.loc["predict/origin", "detail"].endswith("2 of 3 series (the others have no test window)")


def test_a_refit_backtest_leaves_out_a_series_too_short_for_its_origins_as_backtest_does():
    """A series that ended in the training months (no row at the origins) refused the whole refit, whatever
    --start or --windows; plain backtest leaves it out with a note, and so does --refit, training on its rows."""
    data = panel(n_series=3, n_rows=120)[["unique_id", "ds", "y"]]
    data = data[(data.unique_id != "S2") | (data.groupby("unique_id").cumcount() < 40)]  # S2 ends early
    predictor = tsformer.fit(data, horizon=HORIZON, config=TINY)
    folds = predictor.backtest(windows=2, start=data["ds"].iloc[100], refit=True)
    assert set(folds["unique_id"]) == {"S0", "S1"} and folds["origin"].nunique() == 2
    assert folds.attrs["notes"][0] == (
        "1 series left out of the scores, too short for the origins ('S2'); each fold still trains on their rows "
        "before its origin"
    )


def test_predictor_methods_run_on_the_runs_threads_and_give_the_callers_back(monkeypatch):
    """A predictor trained on one thread (to share the cores) predicts, evaluates and checks on one, as the
    commands run a saved run, and the caller's count is as it was after."""
    import tsformer.evaluate as evaluation

    predictor = tsformer.fit(make_frame(), horizon=HORIZON, config={**TINY, "train.num_threads": 1})
    seen = []
    real = evaluation.evaluate
    monkeypatch.setattr(evaluation, "evaluate", lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        predictor.evaluate()
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
