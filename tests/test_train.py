import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import tiny_config

import tsformer.train as train_module
from tsformer.config import TrainConfig
from tsformer.data import training_data
from tsformer.errors import ConfigError, LeakageError
from tsformer.metrics import PANEL_SCORE_FLOOR, ValidationScore
from tsformer.model import Forecaster
from tsformer.predictor import load_predictor
from tsformer.schedule import lr_at
from tsformer.train import train


def same_score(loss: float) -> ValidationScore:
    """A validation score whose MSE is the score (one series)."""
    return ValidationScore(loss, loss)


def test_schedule_warms_up_then_decays_to_the_floor():
    assert lr_at(0, 100, 1.0, warmup_frac=0.1) == pytest.approx(0.1)
    assert lr_at(9, 100, 1.0, warmup_frac=0.1) == pytest.approx(1.0)
    assert lr_at(10, 100, 1.0, warmup_frac=0.1, min_lr_ratio=0.0) == pytest.approx(1.0)
    assert lr_at(55, 100, 1.0, warmup_frac=0.1, min_lr_ratio=0.0) == pytest.approx(0.5)
    assert lr_at(100, 100, 1.0, warmup_frac=0.1, min_lr_ratio=0.2) == pytest.approx(0.2)


def test_run_folder_contents_and_history(tiny_csv, tmp_path):
    result = train(tiny_config(tiny_csv), tmp_path / "run", show_progress=False).summary
    names = {p.name for p in (tmp_path / "run").iterdir()}
    assert {"model.pt", "last.pt", "config.yaml", "history.csv", "loss.png"} <= names
    history = pd.read_csv(tmp_path / "run" / "history.csv")
    assert list(history["epoch"]) == [1, 2]
    assert result.best_val_loss == pytest.approx(history["val_loss"].min())
    assert result.n_train_windows == 168 - 16 - 4 + 1


def test_same_seed_same_weights(tiny_csv, tmp_path):
    cfg = tiny_config(tiny_csv)
    train(cfg, tmp_path / "one", show_progress=False)
    train(cfg, tmp_path / "two", show_progress=False)
    other = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=1))
    train(other, tmp_path / "three", show_progress=False)
    one, two, three = (load_predictor(tmp_path / n / "model.pt").model.state_dict() for n in ("one", "two", "three"))
    assert all(torch.equal(one[k], two[k]) for k in one)
    assert not all(torch.equal(one[k], three[k]) for k in one)


def test_early_stopping_keeps_the_best_epoch(tiny_csv, tmp_path, monkeypatch):
    losses = iter([0.5, 0.4, 0.6, 0.7, 0.8, 0.1])
    monkeypatch.setattr(train_module._Runner, "_val_loss", lambda self, windows: same_score(next(losses)))
    cfg = tiny_config(tiny_csv)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, epochs=6, patience=2))
    result = train(cfg, tmp_path / "run", show_progress=False).summary
    assert (result.best_epoch, result.epochs_run, result.best_val_loss) == (2, 4, 0.4)


def test_refuses_to_start_when_a_leakage_check_fails(tiny_csv, tmp_path, monkeypatch):
    from tsformer.model import attention

    monkeypatch.setattr(attention, "causal_mask", lambda n, device=None: torch.ones(n, n, dtype=torch.bool))
    with pytest.raises(LeakageError, match="leakage check failed"):
        train(tiny_config(tiny_csv), tmp_path / "run", show_progress=False)
    assert not (tmp_path / "run").exists()


def test_an_existing_run_is_not_overwritten(tiny_csv, tmp_path):
    cfg = tiny_config(tiny_csv)
    train(cfg, tmp_path / "run", show_progress=False)
    with pytest.raises(ConfigError, match="already exists.*--overwrite"):
        train(cfg, tmp_path / "run", show_progress=False)
    train(cfg, tmp_path / "run", overwrite=True, show_progress=False)


def test_resume_removes_temp_files_of_interrupted_saves(tiny_csv, tmp_path):
    train(tiny_config(tiny_csv), tmp_path / "run", show_progress=False)
    stale = tmp_path / "run" / ".last.pt.k1ll3d.tmp"
    stale.write_bytes(b"half a checkpoint")
    result = train(tiny_config(tiny_csv), tmp_path / "run", resume=True, show_progress=False).summary
    assert not stale.exists() and result.epochs_run == 2


def test_validation_loss_is_the_mse_of_the_last_token_forecast(tiny_csv, tmp_path):
    cfg = tiny_config(tiny_csv)
    result = train(cfg, tmp_path / "run", show_progress=False).summary
    best = load_predictor(tmp_path / "run" / "model.pt").model
    val = training_data(cfg).split_windows("val").split(16)  # (N, L, C) contexts, (N, H, C) targets, covariates
    by_hand = (best.predict(val.context, None, val.covariates) - val.target).square().mean().item()
    assert result.best_val_loss == result.best_val_mse == pytest.approx(by_hand, rel=1e-5)  # one series: the MSE


def test_a_panel_chooses_its_epoch_by_the_geometric_mean_of_its_series_mse(tmp_path):
    from test_long_format import long_frame

    path = tmp_path / "long.csv"
    long_frame({"A": 120, "B": 96, "C": 150}).to_csv(path, index=False)
    cfg = tiny_config(path)
    result = train(cfg, tmp_path / "run", show_progress=False).summary
    best = load_predictor(tmp_path / "run" / "model.pt").model
    val_windows = training_data(cfg).split_windows("val")
    val = val_windows.split(16)
    error = (best.predict(val.context, val.context_observed, val.covariates) - val.target).square()  # (N, H, 1)
    series = val_windows.series()
    per_series = [error[torch.from_numpy(series == i)].mean().item() for i in range(3)]
    by_hand = float(np.exp(np.mean(np.log(np.maximum(per_series, PANEL_SCORE_FLOOR)))))
    assert result.best_val_loss == pytest.approx(by_hand, rel=1e-5)
    assert result.best_val_mse == pytest.approx(error.mean().item(), rel=1e-5)
    history = pd.read_csv(tmp_path / "run" / "history.csv")
    assert history["val_loss"].min() == pytest.approx(by_hand, rel=1e-5)
    assert history["val_mse"].iloc[result.best_epoch - 1] == pytest.approx(result.best_val_mse)


@pytest.mark.parametrize("all_positions", [True, False])
def test_a_step_trains_every_token_or_the_last(tiny_csv, tmp_path, monkeypatch, all_positions):
    cfg = tiny_config(tiny_csv)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, epochs=1, all_positions=all_positions))
    seen = []
    real_forward = Forecaster.forward

    def recording(self, x, observed=None, target=None, target_observed=None, covariates=None):
        if target is not None:
            seen.append((x, target))
        return real_forward(self, x, observed, target, target_observed, covariates)

    monkeypatch.setattr(Forecaster, "forward", recording)
    train(cfg, tmp_path / "run", show_progress=False)
    x, target = seen[0]
    assert x.shape == (32, 16, 2)
    if all_positions:  # token k's target: the 4 steps after its patch, in the context for every token but the last
        assert target.shape == (32, 4, 4, 2)
        assert torch.equal(target[:, 0], x[:, 4:8]) and torch.equal(target[:, 2, 0], x[:, 12])
    else:
        assert target.shape == (32, 4, 2)
    n_windows = len(training_data(cfg).windows("train"))
    assert len(seen) == -(-n_windows // 32)  # one forward with a target per step


def test_huber_loss_is_no_longer_an_option():
    with pytest.raises(ConfigError, match="train.loss must be one of \\('auto', 'mse', 'mae', 'mase'\\)"):
        TrainConfig(loss="huber")


def test_the_summary_says_what_stopped_training(tiny_csv, tmp_path, monkeypatch):
    cfg = tiny_config(tiny_csv)  # 2 epochs, patience 5: the limit, while validation improves
    losses = iter([0.5, 0.4])
    monkeypatch.setattr(train_module._Runner, "_val_loss", lambda self, windows: same_score(next(losses)))
    assert train(cfg, tmp_path / "one", show_progress=False).summary.stopped_by == (
        "stopped at the epoch limit (2, --epochs) while validation was still improving: more epochs may help"
    )
    losses = iter([0.5, 0.6, 0.7])
    patient = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, epochs=6, patience=2))
    assert train(patient, tmp_path / "two", show_progress=False).summary.stopped_by == (
        "stopped when validation stopped improving (2 epochs without a better loss, train.patience)"
    )


def test_a_small_file_trains_past_ten_epochs_until_validation_stops_improving(tiny_csv, tmp_path, monkeypatch):
    cfg = tiny_config(tiny_csv)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, epochs=0, patience=3))  # automatic
    losses = iter([1.0 / epoch for epoch in range(1, 15)] + [0.5] * 3)  # better for 14 epochs, then not
    monkeypatch.setattr(train_module._Runner, "_val_loss", lambda self, windows: same_score(next(losses)))
    predictor = train(cfg, tmp_path / "run", show_progress=False)
    summary = predictor.summary
    assert predictor.config.train.epochs == 100  # a few windows: 100 short epochs at most
    assert (summary.best_epoch, summary.epochs_run) == (14, 17)
    assert summary.stopped_by.startswith("stopped when validation stopped improving (3 epochs")
    assert len(pd.read_csv(tmp_path / "run" / "history.csv")) == 17


def epoch_batches(monkeypatch, record) -> list[torch.Tensor]:
    """What `record(windows, index)` gives for each batch the training epochs take (not the checks before them)."""
    drawn = []
    original, loop = train_module.WindowIndex.take, train_module._Runner.loop

    def spy(self, index, device="cpu"):
        drawn.append(record(self, index).clone())
        return original(self, index, device)

    def counted_loop(self, *args):
        drawn.clear()
        return loop(self, *args)

    monkeypatch.setattr(train_module.WindowIndex, "take", spy)
    monkeypatch.setattr(train_module._Runner, "loop", counted_loop)
    return drawn


def test_an_epoch_budget_trains_that_many_windows_drawn_anew_each_epoch(tiny_csv, tmp_path, monkeypatch):
    cfg = tiny_config(tiny_csv)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, epochs=2, epoch_windows=40, final_fit=True))
    drawn = epoch_batches(monkeypatch, lambda windows, index: index)
    predictor = train(cfg, show_progress=False)
    n_windows = predictor.summary.n_train_windows
    assert n_windows > 80  # the budget is a part of every epoch
    held_out = drawn[:4]  # 2 epochs of 2 batches of 32 and 8 windows: 40 windows each
    assert [len(batch) for batch in held_out] == [32, 8, 32, 8]
    first, second = torch.cat(held_out[:2]), torch.cat(held_out[2:])
    assert len(set(first.tolist())) == 40 and set(first.tolist()) != set(second.tolist())  # a new draw
    assert predictor.final.steps == predictor.summary.best_epoch * 2  # the final fit's epochs are as long


def test_sampled_epochs_cover_every_series_of_a_panel_alike(tmp_path, monkeypatch):
    from test_long_format import long_frame

    csv = tmp_path / "long.csv"
    long_frame({"A": 90, "B": 400, "C": 80, "D": 120}).to_csv(csv, index=False)  # B holds most windows
    cfg = tiny_config(csv)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, epochs=3, epoch_windows=16, batch_size=16))
    drawn = epoch_batches(monkeypatch, lambda windows, index: windows.floors[index])  # each window's series
    train(cfg, show_progress=False)
    epochs = drawn[:3]  # one batch of 16 an epoch
    for epoch in epochs:
        assert sorted(torch.unique(epoch, return_counts=True)[1].tolist()) == [4, 4, 4, 4]  # 4 from each series
    assert len({tuple(epoch.tolist()) for epoch in epochs}) == 3


def test_the_device_notes_name_an_idle_gpu_and_a_resume_on_another_number_of_processes(monkeypatch):
    from tsformer import distributed
    from tsformer.train import _device_notes

    one_cpu = distributed.Dist(rank=0, world_size=1, device=torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _device_notes(one_cpu, {"world_size": 1}) == [] and _device_notes(one_cpu, {}) == []
    assert _device_notes(one_cpu, {"world_size": 2}) == [
        "resumed on 1 process where it trained on 2: it goes on from the saved epoch, but not exactly as an "
        "uninterrupted run would (resume on as many for that)"
    ]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert _device_notes(one_cpu, None) == [
        "training on the CPU though torch finds a GPU: --set train.device=cuda (or auto) trains on it"
    ]
