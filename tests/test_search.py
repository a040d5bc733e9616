"""The recipe search under train.time_limit (tsformer.search): the declared space in order, members kept only
while validation improves, the budget held, and the searched run read like any other."""

from __future__ import annotations

import dataclasses
import io
import time
import types

import pandas as pd
import pytest
import torch
from helpers import make_frame, tiny_config

from tsformer import search as search_module
from tsformer.check import check_predictor
from tsformer.config import longer_context, seconds_of
from tsformer.data import training_data
from tsformer.errors import ConfigError
from tsformer.model import Ensemble
from tsformer.predictor import load_predictor
from tsformer.search import Candidate, HeldOut, mean_outputs, search, validation_targets
from tsformer.train import SEARCH_FILE, train


def searched_config(time_limit: float, **train_fields):
    cfg = tiny_config()
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, time_limit=time_limit, **train_fields))


class Clock:
    """A fake time.monotonic that the fake trainer moves on."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def fake_trainer(clock: Clock, noise: dict[str, float], seconds: dict[str, float], calls: list):
    """Trains nothing: a candidate's validation forecast is the truth plus its own noise (seeded by its name),
    and it takes its `seconds` of the fake clock."""

    def trainer(candidate: Candidate, deadline: float) -> HeldOut:
        calls.append((candidate.name, deadline))
        data = candidate.data
        target = data.split_windows("val").split(data.config.model.context_len).target
        generator = torch.Generator().manual_seed(sum(map(ord, candidate.name)))
        point = target + noise[candidate.name] * torch.randn(target.shape, generator=generator)
        took = seconds.get(candidate.name, 1.0)
        clock.now += took
        return HeldOut(candidate, None, (point, None), 100, 2, 3, took, took / 2, "patience", [])

    return trainer


@pytest.fixture
def data(tmp_path):
    return training_data(searched_config(600), make_frame())


def test_the_space_is_tried_in_order_and_members_are_kept_while_validation_improves(data, monkeypatch):
    clock, calls = Clock(), []
    monkeypatch.setattr(search_module, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    noise = {"default": 1.0, "context 32": 0.8, "cycle 168": 1.1, "loss mae": 1.2, "seed 1": 0.8, "seed 2": 0.8}
    noise["seed 3"] = 5.0
    found = search(searched_config(600), data, 600.0, 0.0, fake_trainer(clock, noise, {}, calls))
    tried = ["default", "context 32", "cycle 168", "loss mae", "seed 1", "seed 2", "seed 3"]
    assert [name for name, _ in calls] == tried
    log = found.log.set_index("candidate")
    assert log["outcome"].to_dict() == {
        "default": "lost",
        "context 32": "chosen",
        "cycle 168": "lost",
        "loss mae": "lost",
        "seed 1": "member",
        "seed 2": "member",
        "seed 3": "left out: the members' validation did not improve",
    }
    assert [m.candidate.config.train.seed for m in found.members] == [0, 1, 2]
    cfg = found.config
    assert (cfg.model.context_len, cfg.model.members, cfg.train.loss) == (32, 3, "mse")
    ensemble_loss = validation_targets(found.data).score(mean_outputs([m.outputs for m in found.members])[0])
    assert found.val_loss == pytest.approx(ensemble_loss)
    assert (
        log.loc["seed 2", "members_val_score"]
        < log.loc["seed 1", "members_val_score"]
        < log.loc["context 32", "val_score"]
    )
    assert found.val_loss < found.default_val_loss == pytest.approx(log.loc["default", "val_score"])


def test_a_candidate_starts_only_when_it_and_the_final_fits_fit_the_budget(data, monkeypatch):
    clock, calls = Clock(), []
    monkeypatch.setattr(search_module, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    noise = {"default": 1.0, "context 32": 0.8, "cycle 168": 1.1, "loss mae": 0.9, "seed 1": 0.8}
    # each takes 10 s (5 to its best epoch); 8 s are kept for the fallback and calibration
    trainer = fake_trainer(clock, noise, {"default": 10.0, "loss mae": 10.0}, calls)
    found = search(searched_config(40), data, 40.0, 8.0, trainer)
    assert calls[0] == ("default", pytest.approx((40.0 - 8.0) / 2))  # half of what is left: its run, then its final fit
    # at 10 s, context 32 would take 20 s and a 10 s final fit: 10 + 20 + 10 + 8 > 40; the cycle (1 s) 10 + 5 fits,
    # and at 11 s so does the other loss; at 21 s a second member would take 10 and two final fits 10: 21 + 20 + 8 > 40
    log = found.log.set_index("candidate")["outcome"].to_dict()
    assert log == {
        "default": "lost",
        "context 32": "not tried (time)",
        "cycle 168": "lost",
        "loss mae": "chosen",
        "seed 1": "not tried (time)",
    }
    assert calls[2] == ("loss mae", pytest.approx(40.0 - 8.0 - 5.0))  # its training stops where the room begins
    assert "not tried for time: context 32, seed 1" in found.line()
    assert "search.csv" in found.line() and ": 3 candidates trained" in found.line()  # those not tried are not counted
    written = pd.read_csv(io.StringIO(found.log.to_csv(index=False)), dtype=str, keep_default_na=False)
    counts = written[["context_len", "seed", "epochs_run", "best_epoch"]]
    assert counts.loc[0].tolist() == ["16", "0", "3", "2"] and counts.loc[1].tolist() == ["", "", "", ""]


def test_the_longer_context_doubles_up_to_720_and_keeps_windows_for_every_step():
    assert longer_context(8640, 96, 24, 336) == 672
    assert longer_context(20000, 96, 24, 480) == 720
    assert longer_context(700, 48, 24, 336) == 0  # 653 windows' half: 326 steps, no longer than 336
    assert longer_context(1000, 24, 24, 336) == 480


def test_time_limits_read_as_seconds():
    assert [seconds_of(t) for t in ("900", "90s", "15m", "2min", "1.5h")] == [900, 90, 900, 120, 5400]
    for bad in ("soon", "-5m", "0"):
        with pytest.raises(ConfigError, match="--time-limit"):
            seconds_of(bad)


@pytest.fixture(scope="module")
def searched_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("search") / "run"
    predictor = train(searched_config(300, final_fit=True), folder, show_progress=False, source=make_frame())
    return predictor, folder


def test_a_searched_run_ships_the_members_chosen_and_checks_as_one_model(searched_run):
    predictor, folder = searched_run
    log = pd.read_csv(folder / SEARCH_FILE)
    assert log["candidate"].tolist()[:4] == ["default", "context 32", "cycle 168", "loss mae"]
    members = int((log["outcome"] == "member").sum()) + 1
    saved = load_predictor(folder / "model.pt")
    assert saved.config.model.members == members == predictor.config.model.members
    assert saved.config.model.context_len == int(log.loc[log["outcome"] == "chosen", "context_len"].iloc[0])
    windows = predictor.data.split_windows("val").split(saved.config.model.context_len)
    inputs = (windows.context, windows.context_observed, windows.covariates)
    for model in (saved.model, saved.final.model):  # the ensemble's forecast is its members' mean, as searched
        parts = model.members if members > 1 else [model]
        assert isinstance(model, Ensemble) == (members > 1)
        expected = torch.stack([m.outputs_last(*inputs)[0] for m in parts]).mean(0)
        torch.testing.assert_close(model.outputs_last(*inputs)[0], expected)
    assert predictor.summary.lines[0].startswith("recipe search within 300 s")
    cycle = f"cycle {saved.config.model.cycle}" if saved.config.model.cycle else "no cycle"  # the week, or none
    assert f", loss {saved.config.train.loss}, {cycle}, {members} member" in predictor.summary.lines[0]
    failed = [r for r in check_predictor(predictor, predictor.data) if not r.passed]
    assert not failed, failed
    assert len(predictor.predict()) == predictor.config.model.horizon


def test_the_time_limit_holds_when_training_would_run_longer():
    cfg = searched_config(8, epochs=10_000, patience=10_000, final_fit=True)
    started = time.monotonic()
    predictor = train(cfg, None, show_progress=False, source=make_frame(n_rows=600))
    wall = time.monotonic() - started
    assert 0.7 * 8 < wall <= 1.1 * 8
    assert predictor.summary.train_seconds <= 1.1 * 8
    assert not [line for line in predictor.summary.lines if line.startswith("the run took")]


def test_a_budget_shorter_than_the_least_run_says_so():
    predictor = train(searched_config(0.05), None, show_progress=False, source=make_frame(n_rows=200))
    assert predictor.summary.train_seconds > 1.1 * 0.05
    line = predictor.summary.lines[1]
    assert line.startswith("the run took ") and "past train.time_limit (0.05 s) by more than 10%" in line, line


def test_a_searched_run_is_not_resumed_but_says_why(searched_run):
    from typer.testing import CliRunner

    from tsformer.cli import app

    _, folder = searched_run
    result = CliRunner().invoke(app, ["train", "--resume", "--out", str(folder)])
    assert result.exit_code == 2
    assert result.stderr.strip().startswith(f"Error: {folder} holds a recipe search (train.time_limit)")
    assert "there is no epoch of it to resume" in result.stderr
    with pytest.raises(ConfigError, match="already exists and is not empty") as refused:  # nor offered as such
        train(searched_config(300), folder, show_progress=False, source=make_frame())
    assert "--overwrite" in str(refused.value) and "--resume" not in str(refused.value)


def test_a_final_fit_the_deadline_cut_short_is_not_shipped(monkeypatch):
    """A final fit stopped before the steps its held-out model took to its best (one step, at a budget far below
    what the data need) would ship an untrained model: predict keeps the held-out one, and the summary says so."""
    import tsformer.train as train_module

    real = train_module._final_fit
    monkeypatch.setattr(train_module, "_final_fit", lambda *a, **k: dataclasses.replace(real(*a, **k), steps=1))
    predictor = train(searched_config(20, final_fit=True), None, show_progress=False, source=make_frame())
    assert predictor.final is None
    assert predictor.summary.lines[-1].startswith("final fit: stopped by the time budget after 1 optimiser steps, ")
    held_out = "models" if predictor.config.model.members > 1 else "model"
    assert predictor.summary.lines[-1].endswith(
        f"so predict forecasts with the held-out {held_out} (a longer --time-limit leaves room for the final fit)"
    )
    assert not [line for line in predictor.summary.lines if line.startswith("final model:")]
    fit, member = types.SimpleNamespace(steps=40), types.SimpleNamespace(steps_to_best=40)
    assert train_module._cut_short([fit], [member]) == ()  # as many steps as the held-out model's: it ships
    assert train_module._cut_short([fit, types.SimpleNamespace(steps=39)], [member, member])[0].startswith(
        "final fit: stopped by the time budget after 39 optimiser steps, fewer than the 40 "
    )
