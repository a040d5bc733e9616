"""tsformer.data.choices: the automatic settings chosen from the training and validation rows only."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from tsformer.config import Config, DataConfig, ModelConfig, TrainConfig, config_from_dict
from tsformer.data.choices import CALENDAR_MIN_GAIN, calendar_gain, resolve_from_data
from tsformer.data.loader import read_series
from tsformer.data.split import split_borders
from tsformer.errors import ConfigError

N_ROWS = 24 * 7 * 12  # twelve weeks of hourly data: 70 % train, 10 % validation, 20 % test


def hourly(weekday_effect: float, seed: int = 0) -> pd.DataFrame:
    """A daily cycle and noise, plus a weekend level shift of `weekday_effect`: the one-day change then
    depends on the weekday, which only the calendar features know."""
    rng = np.random.default_rng(seed)
    dates = pd.date_range("2024-01-01", periods=N_ROWS, freq="h")
    t = np.arange(N_ROWS)
    weekend = (dates.day_of_week >= 5).astype(float)
    load = 10 + 3 * np.sin(2 * np.pi * t / 24) + weekday_effect * weekend + rng.normal(0, 0.3, N_ROWS)
    return pd.DataFrame({"date": dates.strftime("%Y-%m-%d %H:%M:%S"), "load": load})


def gain_of(table: pd.DataFrame, data: DataConfig = DataConfig(), horizon: int = 24):
    frame = read_series(table, data)
    return calendar_gain(frame, split_borders(data, frame, 0, horizon, min_history=1))


def test_a_weekday_effect_is_found_and_a_plain_daily_cycle_is_not():
    found, plain = gain_of(hourly(weekday_effect=4.0)), gain_of(hourly(weekday_effect=0.0))
    assert found.helps and found.ratio < 0.8
    assert not plain.helps and 1 - CALENDAR_MIN_GAIN < plain.ratio < 1.02
    assert (found.train_rows, found.val_rows) == (round(0.7 * N_ROWS) - 24, round(0.8 * N_ROWS) - round(0.7 * N_ROWS))


def test_the_test_split_never_moves_the_choice():
    table = hourly(weekday_effect=4.0)
    changed = table.copy()
    changed.loc[int(0.8 * N_ROWS) + 1 :, "load"] = 1e6  # every test-split value
    assert gain_of(changed) == gain_of(table)


def test_unobserved_cells_are_left_out():
    table = hourly(weekday_effect=4.0)
    holes = table.copy()
    holes.loc[100:130, "load"] = np.nan
    gain = gain_of(holes, DataConfig(fill="ffill"))
    assert gain.helps
    assert gain.train_rows == gain_of(table).train_rows - 31 - 24  # each hole, and the day after it


def test_resolve_chooses_calendar_loss_and_sizes_and_says_so():
    cfg = Config(model=ModelConfig(horizon=24))
    chosen, notes = resolve_from_data(cfg, read_series(hourly(weekday_effect=4.0), cfg.data))
    assert (chosen.data.calendar, chosen.train.loss) == (True, "mse")
    assert chosen.model.resolved
    assert notes[0].startswith("context_len 336 and patch_len 24 chosen for 1411 training rows")
    assert notes[1].startswith(
        "chosen from the data: calendar features used (with them a linear probe's validation error moves -2"
    )
    assert notes[1].endswith(
        "over 202 rows; used from -5 %); train.loss mse (a wide file); at most 56 epochs (1,052 training windows; "
        "patience 3 ends it earlier); model.members 3 (the mean of 3 models from their own initial weights, as an "
        "epoch of 9 steps is short); set with --set data.calendar=true|false, --set train.loss=mse|mae|mase, "
        "--set train.epochs=N, --set model.members=N"
    )
    assert chosen.train.epochs == 56  # 9 steps of 128 windows an epoch: 56 epochs reach 500 steps
    assert chosen.model.members == 3  # 10 epochs of 9 steps are fewer than 500


def test_a_panel_gets_the_mae_loss():
    wide = hourly(weekday_effect=0.0)
    panel = pd.concat([wide.assign(unique_id="a"), wide.assign(unique_id="b", load=wide.load * 2)])
    cfg = Config(model=ModelConfig(horizon=24))
    chosen, _ = resolve_from_data(cfg, read_series(panel, cfg.data))
    assert (chosen.data.calendar, chosen.train.loss) == (False, "mae")


def test_one_series_in_long_format_gets_the_loss_of_one_series():
    one = hourly(weekday_effect=0.0).assign(unique_id="only")
    cfg = Config(model=ModelConfig(horizon=24))
    chosen, notes = resolve_from_data(cfg, read_series(one, DataConfig(id_cols=("unique_id",))))
    assert chosen.train.loss == "mse" and "train.loss mse (one series)" in notes[-2]  # then the candidates


def test_a_calendar_that_is_not_a_bool_is_refused_when_the_config_is_built():
    with pytest.raises(ConfigError, match="data.calendar must be true, false or auto, got 'false'"):
        DataConfig(calendar="false")


def test_given_settings_are_kept_without_a_note():
    cfg = Config(
        data=DataConfig(calendar=False),
        model=ModelConfig(horizon=24, context_len=48, patch_len=24, cycle=0, members=1, dropout=0.3),
        train=TrainConfig(loss="mae", epochs=7, lr=1e-3, candidates=("seasonal_naive",)),
    )
    assert resolve_from_data(cfg, read_series(hourly(weekday_effect=4.0), cfg.data)) == (cfg, ())


def test_a_frequency_without_calendar_cycles_needs_no_probe():
    years = pd.DataFrame({"year": [str(y) for y in range(1900, 2000)], "v": np.arange(100.0)})
    cfg = Config(model=ModelConfig(horizon=4))
    chosen, notes = resolve_from_data(cfg, read_series(years, cfg.data))
    assert chosen.data.calendar is False
    assert notes[1] == (
        "chosen from the data: train.loss mse (a wide file); at most 100 epochs (35 training windows; patience 3 "
        "ends it earlier); model.members 3 (the mean of 3 models from their own initial weights, as an epoch of "
        "1 step is short); set with --set train.loss=mse|mae|mase, --set train.epochs=N, --set model.members=N"
    )


def resolved_for(n_rows: int, dropout: float | None = None, **train) -> tuple[Config, tuple[str, ...]]:
    """The config and notes resolved for a wide hourly file of `n_rows` rows (the first 80 % training rows)."""
    table = pd.DataFrame(
        {"date": pd.date_range("2020-01-01", periods=n_rows, freq="h"), "v": np.sin(np.arange(n_rows) / 3.0)}
    )
    data = DataConfig(calendar=False, split_borders=(n_rows * 4 // 5, n_rows * 9 // 10, n_rows))
    model = ModelConfig(horizon=24, context_len=48, patch_len=24, cycle=0, dropout=dropout)
    cfg = Config(data=data, model=model, train=TrainConfig(**train))
    return resolve_from_data(cfg, read_series(table, cfg.data))


def chosen_for(n_rows: int, dropout: float | None = None, **train) -> Config:
    return resolved_for(n_rows, dropout, **train)[0]


def members_chosen(n_rows: int, **train) -> int:
    return chosen_for(n_rows, **train).model.members


def test_three_members_where_ten_epochs_take_fewer_than_500_steps_else_one():
    # 0.8 n - 48 - 24 + 1 training windows, 128 a step: 50 steps an epoch (10 epochs: 500 steps) from 6,273
    assert members_chosen(8_000) == 1  # 6,329 windows: 50 steps
    assert members_chosen(7_930) == 1  # 6,273 windows: 50 steps
    assert members_chosen(7_920) == 3  # 6,265 windows: 49 steps
    assert members_chosen(7_920, batch_size=64) == 1  # 98 steps an epoch
    assert members_chosen(8_000, epoch_windows=1_000) == 3  # an epoch's budget counts, not every window


def test_long_epochs_train_three_epochs_at_twice_the_rate_with_less_dropout():
    # 0.8 n - 48 - 24 + 1 training windows, 8 a step: 1,000 steps an epoch from 7,993 windows (n = 10,080)
    long, short = chosen_for(10_080, batch_size=8), chosen_for(10_079, batch_size=8)
    assert (long.model.dropout, long.train.epochs, long.train.lr) == (0.1, 3, 2e-3)
    assert (short.model.dropout, short.train.epochs, short.train.lr) == (0.3, 10, 1e-3)
    given = chosen_for(10_080, dropout=0.2, batch_size=8, epochs=7, lr=5e-4)
    assert (given.model.dropout, given.train.epochs, given.train.lr) == (0.2, 7, 5e-4)  # given settings are kept
    assert chosen_for(10_080, batch_size=16).model.dropout == 0.3  # 500 steps an epoch: not long
    # three epochs at twice the rate only with the light dropout they were measured with
    with_dropout = chosen_for(10_080, dropout=0.3, batch_size=8)
    assert (with_dropout.train.epochs, with_dropout.train.lr) == (10, 1e-3)
    # given epochs keep the light dropout, at the usual rate
    given_epochs = chosen_for(10_080, batch_size=8, epochs=7)
    assert (given_epochs.model.dropout, given_epochs.train.lr) == (0.1, 1e-3)
    budget = chosen_for(10_080, batch_size=8, epoch_windows=4_000)  # an epoch's budget counts: 500 steps
    assert (budget.model.dropout, budget.train.epochs, budget.train.lr) == (0.3, 10, 1e-3)


def test_long_epochs_say_what_they_chose():
    _, notes = resolved_for(10_080, batch_size=8)
    assert "at most 3 epochs (7,993 training windows, long epochs; patience 3 ends it earlier)" in notes[0]
    assert "model.dropout 0.1 (1,000 steps an epoch: so many windows need less)" in notes[0]
    assert "train.lr 0.002 (long epochs: 3 at twice the usual rate)" in notes[0]
    assert "--set model.dropout=P" in notes[0] and "--set train.lr=R" in notes[0]


def test_the_recipe_search_and_a_given_count_keep_their_members():
    assert members_chosen(1_000, time_limit=600.0) == 1  # the search adds members itself
    table = hourly(weekday_effect=0.0)
    cfg = Config(model=ModelConfig(horizon=24, members=2))
    assert resolve_from_data(cfg, read_series(table, cfg.data))[0].model.members == 2


def test_auto_none_and_bools_are_read_for_the_calendar():
    read = lambda value: config_from_dict({"data": {"calendar": value}}).data.calendar  # noqa: E731
    assert (read("auto"), read(None), read(True), read(False)) == (None, None, True, False)
    with pytest.raises(ConfigError, match="data.calendar must be of type bool or auto, got 'maybe'"):
        read("maybe")


def test_split_borders_take_numpy_integers():
    cfg = config_from_dict({"data": {"split_borders": [np.int64(10), np.int32(20), "2024-02-01"]}})
    assert cfg.data.split_borders == (10, 20, "2024-02-01")
    assert all(type(b) is int for b in cfg.data.split_borders[:2])
    with pytest.raises(ConfigError, match="row numbers or dates"):
        config_from_dict({"data": {"split_borders": [1.5, 2, 3]}})


def test_prepare_refuses_unresolved_settings():
    from tsformer.data.prepare import prepare

    cfg = Config(model=ModelConfig(horizon=24, context_len=48, patch_len=24))
    frame = read_series(hourly(weekday_effect=0.0), cfg.data)
    with pytest.raises(ConfigError, match="automatic settings must be chosen first"):
        prepare(frame, cfg)
    resolved = dataclasses.replace(cfg, data=DataConfig(calendar=False), train=TrainConfig(loss="mse", epochs=10))
    with pytest.raises(ConfigError, match="automatic settings must be chosen first"):  # model.cycle still automatic
        prepare(frame, resolved)
    resolved = dataclasses.replace(resolved, model=dataclasses.replace(resolved.model, cycle=0))
    assert prepare(frame, resolved).config == resolved


def test_a_default_run_stores_what_was_chosen(tmp_path):
    """`tsformer train` with the automatic settings: the run's config holds the choices, and the user hears them."""
    import yaml
    from helpers import TINY_SIZE_FLAGS
    from test_long_format import long_frame
    from typer.testing import CliRunner

    from tsformer.cli import app

    csv = tmp_path / "panel.csv"
    long_frame({"A": 120, "B": 96, "C": 150}).to_csv(csv, index=False)
    result = CliRunner().invoke(app, ["train", str(csv), "--out", str(tmp_path / "run"), *TINY_SIZE_FLAGS])
    assert result.exit_code == 0, result.output
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    chosen = ("calendar", "val_horizons"), ("loss", "final_fit")
    assert [saved["data"][key] for key in chosen[0]] + [saved["train"][key] for key in chosen[1]] == [
        False,
        3,  # 3 horizons of validation per series
        "mae",
        True,
    ]
    assert "chosen from the data: calendar features left out (with them a linear probe's" in result.stderr
    assert not (tmp_path / "run" / "calibration").exists()


def panel_of(n_rows: int, freq: str = "h", n_series: int = 3) -> pd.DataFrame:
    """unique_id, ds, y: `n_series` series of `n_rows` steps each."""
    stamps = pd.date_range("2024-01-01", periods=n_rows, freq=freq).strftime("%Y-%m-%d %H:%M:%S")
    rng = np.random.default_rng(0)
    return pd.concat(
        pd.DataFrame({"unique_id": f"s{i}", "ds": stamps, "y": rng.normal(size=n_rows)}) for i in range(n_series)
    )


def cycle_chosen(table: pd.DataFrame, horizon: int = 24) -> tuple[int, str]:
    cfg = Config(model=ModelConfig(horizon=horizon, context_len=48, patch_len=24), train=TrainConfig(epochs=3))
    chosen, notes = resolve_from_data(cfg, read_series(table, DataConfig()))
    return chosen.model.cycle, next((part for note in notes for part in note.split("; ") if "model.cycle" in part), "")


def test_a_panel_below_a_day_gets_the_weekly_cycle_and_other_data_none():
    assert cycle_chosen(panel_of(800)) == (168, "model.cycle 168 (a weekly cycle for a panel of data below a day)")
    assert cycle_chosen(panel_of(800, "30min"))[0] == 336
    cycle, why = cycle_chosen(panel_of(300))  # 300 - 24 test - 72 validation = 204 training rows each
    assert cycle == 0 and "the median series has 204 training rows, under the two weeks (336) it needs" in why
    assert cycle_chosen(panel_of(400, "D"), horizon=7) == (0, "")  # days: no cycle to choose
    assert cycle_chosen(hourly(weekday_effect=0.0)) == (0, "")  # a wide file keeps none
    given = Config(model=ModelConfig(horizon=24, context_len=48, patch_len=24, cycle=24), train=TrainConfig(epochs=3))
    assert resolve_from_data(given, read_series(panel_of(800), DataConfig()))[0].model.cycle == 24  # a given one stays


def context_chosen(table: pd.DataFrame, horizon: int = 24) -> int:
    cfg = Config(model=ModelConfig(horizon=horizon), train=TrainConfig(epochs=3))
    return resolve_from_data(cfg, read_series(table, DataConfig()))[0].model.context_len


def test_a_small_panel_below_a_day_reads_whole_weeks_past_336_steps_and_other_data_up_to_336():
    assert context_chosen(panel_of(2016)) == 672  # 1920 training rows a series: four weeks, the most under 720
    assert context_chosen(panel_of(1200)) == 504  # 1104 rows: 1081 windows' half, 540 steps, three weeks
    assert context_chosen(panel_of(1000)) == 336  # 904 rows: 440 steps, two weeks as for other data
    assert context_chosen(panel_of(800)) == 336  # 704 rows: 340 steps
    assert context_chosen(panel_of(2016, n_series=10)) == 336  # 18,970 windows: epochs not short, not a small panel
    assert context_chosen(panel_of(2016, n_series=1)) == 336  # one series in long format is not a panel
    assert context_chosen(hourly(weekday_effect=0.0)) == 336  # nor a wide file (1411 training rows)
    assert context_chosen(panel_of(2016, "D"), horizon=7) == 336  # nor days
    given_patch = Config(model=ModelConfig(horizon=24, patch_len=10), train=TrainConfig(epochs=3))
    chosen, _ = resolve_from_data(given_patch, read_series(panel_of(1200), DataConfig()))
    assert chosen.model.context_len == 330  # 10 steps do not divide the week: whole patches up to 336


def members_for(table: pd.DataFrame, horizon: int = 24, **train) -> tuple[int, tuple[int, ...], str]:
    cfg = Config(model=ModelConfig(horizon=horizon), train=TrainConfig(epochs=3, **train))
    chosen, notes = resolve_from_data(cfg, read_series(table, DataConfig()))
    why = next((part for note in notes for part in note.split("; ") if "model.members" in part), "")
    return chosen.model.members, chosen.model.member_contexts, why


def test_a_panel_below_a_day_with_long_epochs_averages_its_context_and_half_of_it():
    # 20 series of 904 training rows: 545 windows each at 336 steps, 10,900 in all, 1,363 steps of 8 an epoch
    members, contexts, why = members_for(panel_of(1000, n_series=20), batch_size=8)
    assert (members, contexts) == (2, (336, 168))
    assert why == "model.members 2 (the mean of models reading the last 336 and 168 steps, as an epoch is long)"
    assert members_for(panel_of(1000, n_series=20), batch_size=32)[:2] == (1, ())  # 341 steps an epoch: not long
    assert members_for(panel_of(1000, "D", n_series=20), horizon=7, batch_size=8)[:2] == (1, ())  # days: no half
    short_context = Config(model=ModelConfig(horizon=24, context_len=96), train=TrainConfig(epochs=3, batch_size=8))
    chosen = resolve_from_data(short_context, read_series(panel_of(1000, n_series=20), DataConfig()))[0].model
    assert (chosen.members, chosen.member_contexts) == (1, ())  # half of 96 steps holds no week
    wide = chosen_for(10_080, batch_size=8).model  # long epochs of one wide file: one member
    assert (wide.members, wide.member_contexts) == (1, ())
    given = Config(model=ModelConfig(horizon=24, member_contexts=(336, 336, 168)), train=TrainConfig(epochs=3))
    chosen = resolve_from_data(given, read_series(panel_of(1000, n_series=20), DataConfig()))[0].model
    assert (chosen.members, chosen.member_contexts, chosen.context_len) == (3, (336, 336, 168), 336)


def test_the_classical_fits_cost_what_each_form_costs():
    from tsformer.classical import ETS_FIT_S, ETS_SEASON_STEP_S, THETA_FIT_S, fit_seconds

    assert fit_seconds(("ets", "theta"), 12, 64) == pytest.approx(0.015 + 0.016 * 12 + 0.01)
    assert (ETS_FIT_S, ETS_SEASON_STEP_S, THETA_FIT_S) == (0.015, 0.016, 0.01)
    assert fit_seconds(("ets",), 12, 25) == pytest.approx(0.015)  # no two seasons and two steps: no seasonal form
    assert fit_seconds(("theta",), 52, 336) == pytest.approx(0.01)


def test_ets_and_theta_are_candidates_where_their_fits_fit_the_budget():
    from tsformer.data.choices import CLASSICAL_BUDGET_S

    quarters = pd.date_range("1970-01-01", periods=200, freq="QS")
    rng = np.random.default_rng(0)
    columns = {f"s{j}": np.cumsum(rng.normal(size=200)) for j in range(12)}
    small = pd.DataFrame({"quarter": quarters.strftime("%Y-%m-%d"), **columns})
    cfg = Config(model=ModelConfig(horizon=8))
    chosen, notes = resolve_from_data(cfg, read_series(small, cfg.data))
    assert chosen.train.candidates[-2:] == ("ets", "theta")
    # 12 columns x (13 validation + 33 test windows) at season 4: (0.015 + 0.064 + 0.01) s each
    windows, seconds = 12 * (13 + 33), 12 * (13 + 33) * 0.089
    assert notes[-1] == (
        f"candidates: ETS and Theta (statsmodels, fit to each window) beside the built-in ones: {windows} "
        f"validation and test windows x columns, about {seconds:.0f} s of one core (up to 300 s); set with --candidates"
    )
    wide = pd.concat([small] + [small.drop(columns="quarter").add_suffix(f"_{k}") for k in range(6)], axis=1)
    chosen, notes = resolve_from_data(cfg, read_series(wide, cfg.data))  # 84 columns: over the budget
    assert "ets" not in chosen.train.candidates and 7 * seconds > CLASSICAL_BUDGET_S
    assert notes[-1].startswith(f"candidates: ETS and Theta left out, as they are fit to each window: {7 * windows:,} ")
    assert notes[-1].endswith(
        "--candidates repeat_last,seasonal_naive,drift,seasonal_drift,linear,ets,theta asks for them"
    )
    # under a time budget they take at most a quarter of it, so the search keeps its time for the model
    limited = Config(model=ModelConfig(horizon=8), train=TrainConfig(time_limit=4 * seconds - 1))
    chosen, notes = resolve_from_data(limited, read_series(small, cfg.data))
    assert "ets" not in chosen.train.candidates
    assert f"(up to {seconds - 0.25:.0f} s, a quarter of --time-limit)" in notes[-1]
    roomy = Config(model=ModelConfig(horizon=8), train=TrainConfig(time_limit=4 * seconds + 1))
    assert resolve_from_data(roomy, read_series(small, cfg.data))[0].train.candidates[-2:] == ("ets", "theta")


def test_the_linear_candidate_is_chosen_where_the_model_has_a_skip_and_a_point_forecast():
    quarters = pd.date_range("1970-01-01", periods=200, freq="QS").strftime("%Y-%m-%d")
    frame = pd.DataFrame({"quarter": quarters, "y": np.cumsum(np.random.default_rng(0).normal(size=200))})
    for model, train, has_linear in [
        (ModelConfig(horizon=8), TrainConfig(), True),
        (ModelConfig(horizon=8, context_skip=False), TrainConfig(), False),
        (ModelConfig(horizon=8), TrainConfig(quantiles=(0.1, 0.9)), False),
    ]:
        cfg = Config(model=model, train=train)
        chosen, _ = resolve_from_data(cfg, read_series(frame, cfg.data))
        assert ("linear" in chosen.train.candidates) is has_linear
        assert chosen.train.candidates[:4] == ("repeat_last", "seasonal_naive", "drift", "seasonal_drift")
