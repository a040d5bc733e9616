"""Backtests: rolling origins in the past, with the trained model or a model refit at each origin."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import make_frame, tiny_config, write_csv
from test_cli_errors import assert_error, invoke

from tsformer.errors import DataError
from tsformer.predictor import load_predictor
from tsformer.runs import backtest_run, refit_backtest
from tsformer.train import train


@pytest.fixture
def run(tmp_path):
    csv = write_csv(tmp_path / "data.csv", make_frame(n_rows=240))
    train(tiny_config(csv), tmp_path / "run", show_progress=False)
    return tmp_path / "run"


def test_backtest_forecasts_equal_evaluates_on_the_windows_they_share(run, monkeypatch):
    import tsformer.evaluate as evaluate_module
    import tsformer.runs as runs_module

    scored = []
    real_score = evaluate_module.score
    monkeypatch.setattr(evaluate_module, "score", lambda f, *a, **k: scored.append(f) or real_score(f, *a, **k))
    runs_module.evaluate_run(run, write=False)
    shipped = scored[0]  # (N, H, C): the model row of evaluate, every stride-1 test window, scaled
    ckpt = load_predictor(run / "model.pt")
    result = backtest_run(run, windows=6, step=1)  # the last 6 windows: evaluate's last 6 test windows
    forecast = result.forecasts["forecast"].to_numpy().reshape(6, 4, 2)  # (origin, step, column)
    expected = ckpt.scaler.inverse(shipped[-6:])
    np.testing.assert_allclose(forecast, expected, rtol=1e-5, atol=1e-6)  # written to 6 significant digits
    cut = ckpt.read().split_windows("test").split(ckpt.config.model.context_len)
    widths = ckpt.calibration.half_widths(cut)[0, -6:]
    assert widths.shape == (6, 4, 2)  # each window's own 80 % half-widths, scaled
    for column, sign in (("lower_80", -1), ("upper_80", 1)):
        bound = result.forecasts[column].to_numpy().reshape(6, 4, 2)
        np.testing.assert_allclose(bound, ckpt.scaler.inverse(shipped[-6:] + sign * widths), rtol=1e-5, atol=1e-5)
    truth = result.forecasts["truth"].to_numpy().reshape(6, 4, 2)
    frame = pd.read_csv(run.parent / "data.csv")
    np.testing.assert_allclose(truth[-1], frame[["a", "b"]].to_numpy()[-4:], rtol=1e-5)
    assert set(result.summary.forecaster) == {"model", "repeat_last", "seasonal_naive", "drift", "seasonal_drift"}
    assert (result.summary.origin == "all").sum() == 5


def test_origins_inside_the_training_data_are_refused_saying_how_many_fit(run):
    with pytest.raises(DataError, match="reach inside the data the model was trained or selected on") as caught:
        backtest_run(run, windows=20, step=4)  # reaches back past row 192, where validation targets end
    assert "12 fit after them: ask for --windows 12 or fewer" in str(caught.value)


def test_a_default_backtest_takes_every_origin_that_fits_after_validation_and_says_so(run):
    result = invoke("backtest", run)  # rows 192-239 are the test split: 12 origins of horizon 4
    assert result.exit_code == 0, result.output
    assert "12 origins, 4 steps apart: all that fit after the run's validation split" in result.stderr
    assert result.stdout.count("\n2024-01-") == 12 and result.stdout.strip().splitlines()[-1].startswith("all")


def test_each_row_names_its_forecaster_and_a_start_out_of_range_names_the_dates_allowed(run):
    result = backtest_run(run, windows=2, step=4)
    table, predictor = result.forecasts, load_predictor(run)
    by_column = dict(zip(predictor.layout.targets, predictor.fallback.choice[0], strict=True))
    assert (table["forecaster"] == table["target"].map(by_column)).all()  # a wide file: one choice per column
    shipped_by = [note for note in result.notes if note.startswith("forecast by")]
    not_model = [column for column, name in by_column.items() if name != "model"]
    assert len(shipped_by) == bool(not_model) and all(f"{column} by " in shipped_by[0] for column in not_model)
    dates = pd.read_csv(run.parent / "data.csv")["date"]
    allowed = f"give one from {dates.iloc[192]} to {dates.iloc[240 - 4]}"  # rows 192-239 are the test split
    with pytest.raises(DataError) as early:
        backtest_run(run, start="2024-01-02")
    assert str(early.value).endswith(f"trained or selected on; {allowed}; or retrain at each origin with --refit")
    assert "series" not in str(early.value)  # a wide file is one series, unnamed
    with pytest.raises(DataError) as late:
        backtest_run(run, start="2024-01-12")
    assert str(late.value).endswith(f"leaves fewer than 4 steps before the end; {allowed}")


def test_refit_without_a_config_refits_with_the_runs_own(run):
    result = invoke("backtest", run, "--refit", "--windows", "2")
    assert result.exit_code == 0, result.output
    assert "fold 1: trained on rows 0.." in result.stderr and "fold 2" in result.stderr
    assert "fold 1 of 2: training on the rows before 2024-01-" in result.stderr  # said as the fold starts
    assert not (run / "fold_1").exists()  # the folds train in memory


def test_refit_folds_choose_the_runs_automatic_settings_again_from_their_own_rows(tmp_path):
    """The run keeps its config as given (checkpoint format 17), so each fold chooses what was automatic (here the
    calendar) from the rows before its origin, not as the run chose
    them on its validation rows, which lie after the early folds' origins."""
    import dataclasses

    cfg = tiny_config(write_csv(tmp_path / "data.csv", make_frame(n_rows=240)))
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, calendar=None))
    train(cfg, tmp_path / "run", show_progress=False)
    predictor = load_predictor(tmp_path / "run")
    assert predictor.config.data.calendar is False  # chosen on the run's validation rows
    given, note = predictor.refit_config()
    assert note == "" and given.data.calendar is None and given.model.context_len == predictor.config.model.context_len
    resolved, note = predictor.replace(given=None).refit_config()  # a run saved before format 17
    assert resolved == predictor.config and "some of them after a fold's origin" in note
    result = invoke("backtest", tmp_path / "run", "--refit", "--windows", "2")
    assert result.exit_code == 0, result.output
    assert "some of them after" not in result.stderr


def test_the_cli_writes_the_long_csv_and_the_plot(run, tmp_path):
    result = invoke(
        "backtest", run, "--windows", "3", "--step", "4", "--out", tmp_path / "bt.csv", "--plot", tmp_path / "bt.png"
    )
    assert result.exit_code == 0, result.output
    assert "origin (last step read)" in result.stdout and result.stdout.strip().splitlines()[-1].startswith("all")
    table = pd.read_csv(tmp_path / "bt.csv")
    assert list(table.columns[:3]) == ["origin", "date", "target"] and len(table) == 3 * 4 * 2
    assert (tmp_path / "bt.png").stat().st_size > 0
    assert_error(
        invoke("backtest", run, "--windows", "30", "--step", "4"),
        "inside the data the model was trained or selected on",
    )
    assert_error(  # --refit without --config refits the run's own: this is no run
        invoke("backtest", tmp_path / "folds", "--refit"),
        "run",
        "folds not found; give a run folder made by tsformer train",
    )


def test_refit_trains_each_fold_on_the_rows_before_its_origin(tmp_path):
    csv = write_csv(tmp_path / "data.csv", make_frame(n_rows=240))
    result = refit_backtest(tiny_config(csv), tmp_path / "folds", windows=2, step=8)
    values = pd.read_csv(csv)[["a", "b"]].to_numpy()
    origins = [240 - 4 - 8, 240 - 4]
    for fold, origin in enumerate(origins, start=1):
        ckpt = load_predictor(tmp_path / "folds" / f"fold_{fold}" / "model.pt")
        train_end = int(ckpt.borders.train_end[0])
        assert int(ckpt.borders.val_end[0]) == origin  # validation ends where the fold forecasts from
        np.testing.assert_allclose(ckpt.scaler.mean[0], values[:train_end].mean(0), rtol=1e-5)
        np.testing.assert_allclose(ckpt.scaler.std[0], values[:train_end].std(0), rtol=1e-5)
    assert len(result.forecasts) == 2 * 4 * 2 and result.forecasts["truth"].notna().all()
    trained = [note for note in result.notes if " trained on rows " in note]
    assert [note[:7] for note in trained] == ["fold 1:", "fold 2:"]
    shipped = [note for note in result.notes if note not in trained]  # each fold's own choice, where not the model
    chosen = {fold: set(result.forecasts.loc[result.forecasts.origin == origin, "forecaster"]) for fold, origin in
              enumerate(result.forecasts.origin.unique(), start=1)}  # fmt: skip
    assert [note[:7] for note in shipped] == [f"fold {fold}:" for fold, names in chosen.items() if names != {"model"}]


def test_refit_cuts_series_of_different_lengths_at_the_same_dates(tmp_path):
    from test_long_format import long_frame

    frame = long_frame({"A": 120, "B": 96})
    a_stamps = frame.loc[frame.unique_id == "A", "ds"]
    frame.loc[frame.unique_id == "B", "ds"] = a_stamps.iloc[-96:].to_numpy()  # B ends with A, 24 steps shorter
    csv = write_csv(tmp_path / "long.csv", frame)
    result = refit_backtest(tiny_config(csv), tmp_path / "folds", windows=2, step=8)
    lengths = {"A": 120, "B": 96}
    for fold, back in enumerate((12, 4), start=1):  # origins 12 and 4 steps before each series' end
        ckpt = load_predictor(tmp_path / "folds" / f"fold_{fold}" / "model.pt")
        for i, key in enumerate(ckpt.series):
            uid = key[0]
            origin = lengths[uid] - back
            assert int(ckpt.borders.val_end[i]) == origin and int(ckpt.borders.train_end[i]) == origin - 4
            assert int(ckpt.borders.test_end[i]) == origin + 4
            y = frame.loc[frame.unique_id == uid, "y"].to_numpy()
            np.testing.assert_allclose(ckpt.scaler.mean[i, 0], y[: origin - 4].mean(), rtol=1e-5)
            np.testing.assert_allclose(ckpt.scaler.std[i, 0], y[: origin - 4].std(), rtol=1e-5)
    assert result.forecasts.groupby("unique_id").size().to_dict() == {"A": 8, "B": 8}
    origins = {
        pd.Timestamp(a_stamps.iloc[107]): 8,
        pd.Timestamp(a_stamps.iloc[115]): 8,
    }  # the last steps before A's origins
    assert result.forecasts.groupby("origin").size().to_dict() == origins
    assert result.notes[0].startswith("fold 1: trained on the steps before ")

    long_frame({"A": 120, "B": 96}).to_csv(csv, index=False)  # B ends 21 hours before A
    with pytest.raises(DataError, match="name the first forecast step with --start DATE"):
        refit_backtest(tiny_config(csv), tmp_path / "folds", windows=2, step=8)


def test_backtest_of_a_long_format_run_covers_every_series(tmp_path):
    from test_long_format import long_frame

    csv = tmp_path / "long.csv"
    long_frame({"A": 120, "B": 96}).to_csv(csv, index=False)
    cfg = tiny_config(csv)
    import dataclasses

    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, split_ratios=(0.6, 0.2, 0.2)))
    train(cfg, tmp_path / "run", show_progress=False)
    result = backtest_run(tmp_path / "run", windows=3, step=4)
    assert result.forecasts.groupby("unique_id").size().to_dict() == {"A": 12, "B": 12}
    stamps = pd.read_csv(csv, parse_dates=["ds"]).groupby("unique_id")["ds"]
    last_reads = {uid: str(ds.iloc[-4 - 1]) for uid, ds in stamps}  # each series' last origin reads up to here
    labels = result.summary.origin.unique().tolist()
    assert labels[-2:] == [f"{last_reads['B']} to {last_reads['A']}", "all"]  # series that end apart: the span
    from tsformer.backtest import format_summary

    rows = format_summary(result).splitlines()[1:]
    assert len({len(row) for row in rows}) == 1  # a span of origins widens the column; the rows stay aligned


def test_daily_origins_and_steps_are_dates(tmp_path):
    frame = make_frame(n_rows=240, freq="D")
    frame["date"] = frame["date"].str[:10]  # dates, as daily data is written
    csv = write_csv(tmp_path / "daily.csv", frame)
    train(tiny_config(csv), tmp_path / "run", show_progress=False)
    result = backtest_run(tmp_path / "run", windows=2, step=4)
    assert result.summary["origin"].iloc[0] == "2024-08-19" and set(result.summary["origin"]) >= {"all"}
    assert result.forecasts["date"].iloc[0] == pd.Timestamp("2024-08-20")  # timestamps in the table, notation in CSV
    written = pd.read_csv(io.StringIO(result.to_csv()), dtype=str)
    assert written["date"].iloc[0] == "2024-08-20" and written["origin"].iloc[0] == "2024-08-19"


def test_rows_appended_after_the_last_origin_leave_every_refit_fold_as_it_was(tmp_path):
    """Each fold's validation length (and so its split, scaler and automatic context) comes from the rows before
    its origin: the same folds from a file 200 rows longer, origins named by --start, are bit-identical."""
    import dataclasses

    frame = make_frame(n_rows=440)
    short = write_csv(tmp_path / "short.csv", frame.head(240))
    long = write_csv(tmp_path / "long.csv", frame)
    cfg = tiny_config(short)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, context_len=0))  # automatic context too
    start = frame["date"][212]
    for csv, name in ((short, "short"), (long, "long")):
        run_cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, path=str(csv)))
        refit_backtest(run_cfg, tmp_path / name, windows=2, step=8, start=start)
    for fold, origin in ((1, 212), (2, 220)):
        a, b = (load_predictor(tmp_path / name / f"fold_{fold}" / "model.pt") for name in ("short", "long"))
        assert a.borders.to_list()[:2] == b.borders.to_list()[:2] and a.config.model == b.config.model
        # validation: the default 0.1 of 0.7 + 0.1 of the rows before the origin
        assert int(a.borders.val_end[0] - a.borders.train_end[0]) == round(origin * 0.1 / 0.8)
        for x, y in zip(a.model.parameters(), b.model.parameters(), strict=True):
            assert torch.equal(x, y)


def test_a_run_whose_candidates_leave_out_the_baselines_is_still_scored_against_them(tmp_path):
    """--candidates drift: repeat-last and seasonal naive cannot ship, yet evaluate and backtest score the model
    beside them, as the same forecasts of an unrestricted run, and the fallback never weighs them."""
    import dataclasses

    from tsformer.backtest import format_summary
    from tsformer.runs import evaluate_run

    csv = write_csv(tmp_path / "data.csv", make_frame(n_rows=240))
    cfg = tiny_config(csv)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, candidates=("drift",)))
    train(cfg, tmp_path / "run", show_progress=False)
    predictor = load_predictor(tmp_path / "run" / "model.pt")
    assert set(predictor.fallback.names) <= {"model", "drift"}
    scores = evaluate_run(tmp_path / "run", write=False).scores
    assert {"model", "repeat_last", "seasonal_naive", "drift"} <= set(scores)
    result = backtest_run(tmp_path / "run", windows=3, step=1)
    assert {"repeat_last", "seasonal_naive"} <= set(result.forecasts.columns)
    assert {"repeat_last", "seasonal_naive"} <= set(result.summary["forecaster"])
    rows = format_summary(result).splitlines()[1:]
    assert len(rows) == 4 and rows[-1].startswith("all")  # three origins, then overall


def test_a_start_the_clock_change_skips_is_refused_in_the_datas_terms():
    from tsformer.backtest import first_rows
    from tsformer.config import DataConfig
    from tsformer.data import read_series

    hours = pd.date_range("2024-03-28", periods=120, freq="h", tz="Europe/Berlin")
    frame = read_series(pd.DataFrame({"date": hours, "y": np.arange(120.0)}), DataConfig())
    assert first_rows(frame, "2024-03-29 05:00").tolist() == [29]  # a plain time, in the data's zone
    with pytest.raises(DataError, match=r"--start '2024-03-31 02:30' is skipped or repeated by the clock change"):
        first_rows(frame, "2024-03-31 02:30")
