"""Automatic context_len and patch_len (0 = chosen from the data at train time): they fit short monthly
or daily series, stay 336/24 for ETTh1-sized hourly data, and a given value always wins."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import layout_of
from typer.testing import CliRunner

from tsformer.cli import app
from tsformer.config import Config, DataConfig, ModelConfig, TrainConfig, load_config, resolve_auto, with_data_path
from tsformer.data import training_data
from tsformer.errors import ConfigError, DataError
from tsformer.model import Forecaster
from tsformer.predictor import load_predictor
from tsformer.runfolder import MODEL_FILE
from tsformer.train import resolve

REPO = Path(__file__).resolve().parent.parent
SMALL_MODEL = [
    "--epochs", "1", "--quiet",
    "--set", "model.d_model=8", "--set", "model.n_heads=2", "--set", "model.d_ff=16",
    "--set", "model.n_layers=1", "--set", "train.batch_size=32",
]  # fmt: skip
AIR_NOTE = (
    "context_len 36 and patch_len 12 chosen for 101 training rows of MS data (season 12) and horizon 12; "
    "set them with --context-len / --set model.patch_len=N"
)


def series_csv(path: Path, n_rows: int, freq: str, start: str = "1949-01-01", period: int = 12) -> Path:
    """A seeded trend plus a cycle of `period` steps, with noise: columns date, value."""
    rng = np.random.default_rng(0)
    t = np.arange(n_rows)
    values = 100 + 2 * t + 20 * np.sin(2 * np.pi * t / period) + rng.normal(0, 3, n_rows)
    stamps = pd.date_range(start, periods=n_rows, freq=freq)
    pd.DataFrame({"date": stamps.strftime("%Y-%m-%d %H:%M:%S"), "value": values.round(3)}).to_csv(path, index=False)
    return path


def auto_config(csv: Path, **model) -> Config:
    """Automatic sizes; the other automatic settings given (tests/test_choices.py covers those)."""
    return Config(
        data=DataConfig(path=str(csv), calendar=True), model=ModelConfig(**model), train=TrainConfig(loss="mse")
    )


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def air_passengers(tmp_path) -> Path:
    """The classic shape: 144 monthly rows from 1949-01, a trend plus a yearly cycle."""
    return series_csv(tmp_path / "air_passengers.csv", 144, "MS")


def test_defaults_are_automatic():
    model = ModelConfig()
    assert (model.context_len, model.patch_len, model.resolved) == (0, 0, False)
    for name in ("etth1", "etth1_96", "etth1_192", "etth1_336", "etth1_720"):  # the bench relies on auto
        assert not load_config(REPO / "configs" / f"{name}.yaml").model.resolved


@pytest.mark.parametrize(
    "n_windows, epochs",
    # M4 Hourly (1,834 steps an epoch: long), the shortest long epoch and one step fewer, ETTh1, the sample, short files
    [(234_682, 3), (128_000, 3), (127_872, 10), (8_209, 10), (1_523, 42), (300, 100), (0, 100)],
)
def test_automatic_epochs_reach_500_steps_from_10_to_100_epochs_or_3_long_ones(n_windows, epochs):
    from tsformer.config import auto_epochs

    assert auto_epochs(n_windows, 128) == epochs


def test_air_passengers_trains_and_predicts_with_defaults(tmp_path, air_passengers):
    run = tmp_path / "run"
    result = invoke("train", air_passengers, "--horizon", "12", "--out", run, *SMALL_MODEL)
    assert result.exit_code == 0, result.output
    assert AIR_NOTE in result.stderr.splitlines()
    saved = yaml.safe_load((run / "config.yaml").read_text())["model"]
    assert (saved["context_len"], saved["patch_len"], saved["horizon"]) == (36, 12, 12)
    model = load_predictor(run / MODEL_FILE).config.model
    assert (model.context_len, model.patch_len) == (36, 12)

    forecast = tmp_path / "forecast.csv"
    result = invoke("predict", run, air_passengers, "--out", forecast)
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(forecast, parse_dates=["date"])
    assert list(frame["date"]) == list(pd.date_range("1961-01-01", periods=12, freq="MS"))
    assert invoke("evaluate", run).exit_code == 0


def test_air_passengers_rule_as_a_pure_function():
    cfg, note = resolve_auto(Config(model=ModelConfig(horizon=12)), n_train_rows=101, season=12, freq="MS")
    assert (cfg.model.context_len, cfg.model.patch_len) == (36, 12)  # 101 - 36 - 12 + 1 = 54 windows >= 36
    assert note == AIR_NOTE


@pytest.mark.parametrize("horizon", [96, 192, 336, 720])
def test_etth1_sized_hourly_data_keeps_336_and_24(tmp_path, horizon):
    csv = series_csv(tmp_path / "hourly.csv", 14400, "h", start="2016-07-01", period=24)
    cfg = auto_config(csv, horizon=horizon)
    cfg = Config(data=DataConfig(path=str(csv), split_borders=(8640, 11520, 14400)), model=cfg.model)
    data = training_data(cfg)
    resolved = data.config
    assert (resolved.model.context_len, resolved.model.patch_len) == (336, 24)
    # a wide file: no cycle; 60 to 65 steps an epoch: one member, the usual dropout
    expected = ModelConfig(context_len=336, patch_len=24, horizon=horizon, cycle=0, members=1, dropout=0.3)
    assert resolved.model == expected
    assert data.borders.to_list() == [[8640], [11520], [14400]]


def test_the_etth1_bench_config_resolves_to_336_and_24():
    cfg = load_config(REPO / "configs" / "etth1_96.yaml")
    cfg, note = resolve_auto(cfg, n_train_rows=8640, season=24, freq="h")
    assert (cfg.model.context_len, cfg.model.patch_len) == (336, 24)
    assert note.startswith("context_len 336 and patch_len 24 chosen for 8640 training rows of h data (season 24)")


def test_a_daily_series_of_400_rows(tmp_path):
    csv = series_csv(tmp_path / "daily.csv", 400, "D", start="2023-01-01", period=7)
    data = training_data(resolve(auto_config(csv, horizon=14)))
    # 280 training rows: 280 - 14 + 1 = 267, so at most 133 steps; 19 weeks of 7 days leave 134 windows
    assert (data.config.model.context_len, data.config.model.patch_len) == (133, 7)
    assert data.notes[:1] == (
        "context_len 133 and patch_len 7 chosen for 280 training rows of D data (season 7) and horizon 14; "
        "set them with --context-len / --set model.patch_len=N",
    )


def test_a_given_context_len_is_kept(tmp_path, air_passengers):
    run = tmp_path / "run"
    result = invoke("train", air_passengers, "--horizon", "12", "--context-len", "24", "--out", run, *SMALL_MODEL)
    assert result.exit_code == 0, result.output
    assert (
        "patch_len 12 chosen for 101 training rows of MS data (season 12) and horizon 12; "
        "set it with --set model.patch_len=N"
    ) in result.stderr.splitlines()
    saved = yaml.safe_load((run / "config.yaml").read_text())["model"]
    assert (saved["context_len"], saved["patch_len"]) == (24, 12)


def test_given_values_win_and_say_nothing(capsys, air_passengers):
    cfg = auto_config(air_passengers, context_len=48, patch_len=6, horizon=12)
    assert resolve_auto(cfg, 101, 12, "MS") == (cfg, "")
    assert resolve(cfg).model == cfg.model and capsys.readouterr().err == ""
    only_patch, _ = resolve_auto(auto_config(air_passengers, patch_len=6, horizon=12), 101, 12, "MS")
    assert (only_patch.model.context_len, only_patch.model.patch_len) == (42, 6)  # 7 patches, 48 windows
    short_context, _ = resolve_auto(auto_config(air_passengers, context_len=8, horizon=12), 101, 12, "MS")
    assert (short_context.model.context_len, short_context.model.patch_len) == (8, 8)  # never past the context


@pytest.mark.parametrize(
    ("season", "patch_len"),
    [(24, 24), (7, 7), (12, 12), (5, 5), (4, 4), (52, 13), (96, 24), (48, 24), (1440, 24), (1, 4)],
)
def test_patch_len_is_the_largest_divisor_of_the_season_up_to_24(season, patch_len):
    cfg, _ = resolve_auto(Config(), n_train_rows=100_000, season=season)
    assert cfg.model.patch_len == patch_len
    assert cfg.model.context_len == (1440 if season == 1440 else 336 // patch_len * patch_len)  # a day of minutes


def test_a_season_past_336_steps_is_the_context_where_the_rows_allow_else_the_note_says_what_it_costs():
    """Minute data's day (1440 steps): a context of 336 made seasonal naive, its drift and MASE's scale repeat the
    last value, under the name of the season."""
    cfg, note = resolve_auto(Config(model=ModelConfig(horizon=60)), n_train_rows=10_080, season=1440, freq="min")
    assert (cfg.model.context_len, cfg.model.patch_len) == (1440, 24)
    assert note.startswith("context_len 1440 and patch_len 24 chosen for 10080 training rows of min data (season 1440)")
    assert "shorter than the season" not in note
    few, note = resolve_auto(Config(model=ModelConfig(horizon=60)), n_train_rows=2_000, season=1440, freq="min")
    assert few.model.context_len == 336  # 1,941 windows would leave fewer than a day of context steps
    assert note == (
        "context_len 336 and patch_len 24 chosen for 2000 training rows of min data (season 1440) and horizon 60, a "
        "context shorter than the season, so seasonal naive repeats the last value (--context-len 1440 reads a whole "
        "season, where the rows allow); set them with --context-len / --set model.patch_len=N"
    )
    seconds, _ = resolve_auto(Config(model=ModelConfig(horizon=60)), n_train_rows=100_000, season=2880, freq="30s")
    assert seconds.model.context_len == 336  # past SEASON_MAX_CONTEXT: the day is not read


def test_short_data_gets_one_patch_then_a_too_few_rows_error():
    cfg, _ = resolve_auto(Config(model=ModelConfig(horizon=12)), n_train_rows=30, season=12)
    assert (cfg.model.context_len, cfg.model.patch_len) == (12, 12)  # 7 windows; two patches would leave none
    with pytest.raises(DataError, match=r"^too few rows: the train split has 23 rows but needs at least 24 "):
        resolve_auto(Config(model=ModelConfig(horizon=12)), n_train_rows=23, season=12)


def test_too_short_for_the_automatic_context_is_one_error_line(tmp_path):
    csv = series_csv(tmp_path / "short.csv", 30, "MS")
    out = tmp_path / "run"
    result = invoke(
        "train", csv, "--horizon", "4", "--out", out, "--set", "data.split_borders=[14, 20, 30]", *SMALL_MODEL
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "Error: too few rows: the train split has 14 rows but needs at least 16 for the shortest automatic "
        "context (patch_len + horizon = 12 + 4); provide more rows or lower --horizon or model.patch_len"
    )
    assert not out.exists() and "Traceback" not in result.output


def test_a_split_shorter_than_the_horizon_is_still_named_first(tmp_path):
    csv = series_csv(tmp_path / "short.csv", 60, "MS")
    result = invoke("train", csv, "--horizon", "12", "--out", tmp_path / "run", *SMALL_MODEL)
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "Error: too few rows: the val split has 6 rows but needs at least 12 (horizon = 12); "
        "provide more rows, or a --horizon of at most 6, or a shorter --context-len"
    )


def test_forgetting_the_horizon_names_the_default_and_a_horizon_that_fits(tmp_path):
    csv = series_csv(tmp_path / "monthly.csv", 144, "MS")  # 12 years of months; --horizon left out
    result = invoke("train", csv, "--out", tmp_path / "run", *SMALL_MODEL)
    assert result.stderr.strip() == (
        "Error: too few rows: the val split has 14 rows but needs at least 96 (horizon = 96; 96 is the default "
        "horizon: --horizon sets it); provide more rows, or a --horizon of at most 14, e.g. --horizon 12 (a season "
        "of MS data), or a shorter --context-len"
    )
    help_text = " ".join(invoke("train", "--help").output.split())  # unwrapped
    assert "(default: 96, model.horizon)" in help_text
    assert "Maximum epochs (default: from the training windows, 10 to 100" in help_text


def test_an_unresolved_config_cannot_build_a_model():
    with pytest.raises(ConfigError, match=r"model.context_len \(0\) and model.patch_len \(0\) must be chosen"):
        Forecaster(ModelConfig(), layout_of(1))
    with pytest.raises(ConfigError, match="must be chosen before a model is built"):
        Forecaster(ModelConfig(context_len=48), layout_of(1))


def test_automatic_values_are_validated():
    with pytest.raises(ConfigError, match=r"model.context_len must be at least 1 \(or 0 to choose it"):
        ModelConfig(context_len=-1)
    with pytest.raises(ConfigError, match=r"must not exceed model.context_len \(automatic, at most 336; set"):
        ModelConfig(patch_len=400)
    assert ModelConfig(patch_len=400, context_len=800).n_tokens == 2


def test_resolve_keeps_the_path_absolute(tmp_path, air_passengers, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = with_data_path(auto_config(air_passengers, horizon=12), air_passengers.name)
    assert resolve(cfg).data.path == str(air_passengers.resolve())
