"""The least-squares start (tsformer.model.linear_start): the context skip fitted in closed form, scored as epoch 0."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import tiny_config

from tsformer.api import fit
from tsformer.check import check_start
from tsformer.data import Prepared, training_data
from tsformer.final import every_row
from tsformer.model import build_forecaster, linear_start
from tsformer.train import LoopState, _start_line


def trends(n_series: int = 12, n_rows: int = 60, seed: int = 0) -> pd.DataFrame:
    """unique_id, ds, y: short annual-like trends, each its own level and slope, little noise (a panel on which a
    linear map of the context beats a briefly trained Transformer)."""
    rng = np.random.default_rng(seed)
    parts = []
    for k in range(n_series):
        t = np.arange(n_rows)
        y = 5.0 + k + (0.02 + 0.01 * k) * t * (1 if k % 2 else -1) + 0.002 * rng.normal(size=n_rows)
        parts.append(
            pd.DataFrame({"unique_id": f"s{k}", "ds": pd.date_range("1960", periods=n_rows, freq="YS"), "y": y})
        )
    return pd.concat(parts, ignore_index=True)


def config(start: bool = True, final_fit: bool = True, **train):
    cfg = tiny_config(context_len=8, horizon=4, patch_len=4)
    return dataclasses.replace(
        cfg,
        data=dataclasses.replace(cfg.data, calendar=False),
        train=dataclasses.replace(cfg.train, least_squares_start=start, final_fit=final_fit, **train),
    )


def test_skip_rows_square_to_the_training_loss_of_the_skip_alone():
    """Each row's squared error under the skip's weights is that token's MSE in the loss the model trains on (head,
    cycle and future skip at zero), so the least-squares fit minimises the training loss of the start."""
    data = training_data(config(), trends())
    torch.manual_seed(0)
    model = build_forecaster(data.config.model, data.layout, "mse")
    start = linear_start.least_squares_start(model, data.split_windows("train"), seed=0)
    torch.nn.init.normal_(start.context_skip.linear.weight, std=0.1)  # any weights: the identity holds for all
    windows = data.split_windows("train")
    unpadded = torch.nonzero(windows.starts - windows.context_len >= windows.floors).flatten()[:40]
    batch = windows.take(unpadded)  # a token of a padded context holds no step: no row, and nothing to fit
    split = batch.split(start.cfg.context_len)
    targets = start.token_targets(batch.target)
    observed = start.token_targets(batch.observed) if batch.observed is not None else None
    _, loss = start(split.context, split.context_observed, target=targets, target_observed=observed)
    inputs, rows = start.skip_rows(split.context, split.context_observed, targets, observed)
    with torch.no_grad():
        by_rows = ((inputs @ start.context_skip.linear.weight.T - rows) ** 2).mean()
    assert len(inputs) == 40 * start.n_tokens  # every token of every window: no step of these is unobserved
    torch.testing.assert_close(by_rows, loss.detach(), rtol=1e-4, atol=1e-6)


def test_the_start_solves_the_normal_equations_of_every_training_row():
    data = training_data(config(), trends())
    windows = data.split_windows("train")
    torch.manual_seed(0)
    model = build_forecaster(data.config.model, data.layout, "mse")
    start = linear_start.least_squares_start(model, windows, seed=0)
    every = windows.take(torch.arange(len(windows)))
    split = every.split(start.cfg.context_len)
    inputs, rows = start.skip_rows(
        split.context, split.context_observed, start.token_targets(every.target), start.token_targets(every.observed)
    )
    a, b = inputs.double().numpy(), rows.double().numpy()
    ridge = linear_start.RIDGE * np.diag(a.T @ a).mean()
    expected = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ b)  # (T*P, H), by hand
    np.testing.assert_allclose(start.context_skip.linear.weight.detach().numpy().T, expected, rtol=1e-3, atol=1e-5)
    assert not start.head.out.weight.any()  # the Transformer adds nothing at the start
    assert model.context_skip.linear.weight.abs().sum() == 0  # the model it copied is left as it was (zero start)


def test_a_panel_of_trends_ships_the_start_and_the_final_fit_repeats_it_on_every_row():
    predictor = fit(trends(), horizon=4, config=config())
    assert predictor.summary.best_epoch == 0
    assert predictor.summary.lines[0].startswith("epoch 0, the least-squares start")
    assert not predictor.model.head.out.weight.any()  # the linear map alone
    final = predictor.final
    assert final.steps == 0 and "the least-squares start fitted on" in predictor.summary.lines[-1]
    held_out, every_row = predictor.model.context_skip.linear.weight, final.model.context_skip.linear.weight
    assert not torch.equal(held_out, every_row)  # fitted again, on every row
    without = fit(trends(), horizon=4, config=config(start=False))
    assert without.summary.best_epoch >= 1
    assert predictor.summary.best_val_loss < without.summary.best_val_loss
    forecast = predictor.predict()
    assert len(forecast) == 12 * 4 and np.isfinite(forecast["y"]).all()


def test_the_summary_says_what_the_start_scored_against_the_trained_epochs():
    history = [{"val_loss": 0.5}, {"val_loss": 0.4}]
    kept = _start_line(0.7, LoopState(best_epoch=2, best_val=0.4, history=history))
    assert kept == ("the least-squares start (epoch 0) scored 0.7 on validation, above the best epoch's 0.4",)
    (shipped,) = _start_line(0.3, LoopState(best_epoch=0, best_val=0.3, history=history))
    assert shipped.startswith("epoch 0, the least-squares start") and "scored 0.3 on validation" in shipped
    assert "below every trained epoch (best 0.4)" in shipped
    assert _start_line(None, LoopState()) == ()


def test_test_rows_replaced_by_noise_leave_the_start_as_it_was():
    frame = trends()
    noisy = frame.copy()
    test_rows = noisy.groupby("unique_id", sort=False).cumcount(ascending=False) < 4  # each series' last 4 (test)
    noisy.loc[test_rows, "y"] = np.random.default_rng(1).normal(size=int(test_rows.sum())) * 100
    first = fit(frame, horizon=4, config=config())
    second = fit(noisy, horizon=4, config=config())
    assert first.summary.best_epoch == second.summary.best_epoch == 0
    for a, b in zip(first.model.parameters(), second.model.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("quantiles", [(), (0.1, 0.9)])
def test_a_model_with_a_quantile_head_has_no_start(quantiles):
    data = training_data(config(), trends())
    model = build_forecaster(data.config.model, data.layout, "mse", quantiles)
    assert linear_start.applies(model) is (not quantiles)


def test_check_proves_the_start_read_the_training_rows_only(monkeypatch):
    predictor = fit(trends(), horizon=4, config=config())
    data = predictor.read()
    result = check_start(predictor, data)
    assert result.passed and result.max_change == 0.0 and "which is the start" in result.detail
    original = Prepared.split_windows

    def every_row_for_training(self, split, stride=1):  # a deliberate break: the fit reads every row
        return original(every_row(self), split, stride) if split == "train" else original(self, split, stride)

    monkeypatch.setattr(Prepared, "split_windows", every_row_for_training)
    broken = check_start(predictor, data)
    assert not broken.passed and broken.max_change > 1e-3


def test_each_member_of_an_ensemble_fits_its_own_context():
    """Members reading 8 and 4 steps: each skip solves the normal equations of its own rows, the shorter member's
    from the last 4 steps of each context."""
    cfg = config()
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, members=2, member_contexts=(8, 4)))
    data = training_data(cfg, trends())
    windows = data.split_windows("train")
    torch.manual_seed(0)
    start = linear_start.least_squares_start(build_forecaster(data.config.model, data.layout, "mse"), windows, 0)
    every = windows.take(torch.arange(len(windows)))
    split = every.split(windows.context_len)
    for member, offset in zip(start.members, (0, 4), strict=True):
        inputs, rows = member.skip_rows(
            split.context[:, offset:],
            split.context_observed[:, offset:],
            member.token_targets(every.target[:, offset:]),
            member.token_targets(every.observed[:, offset:]),
        )
        a, b = inputs.double().numpy(), rows.double().numpy()
        expected = np.linalg.solve(a.T @ a + linear_start.RIDGE * np.diag(a.T @ a).mean() * np.eye(a.shape[1]), a.T @ b)
        assert member.cfg.context_len == 8 - offset
        np.testing.assert_allclose(member.context_skip.linear.weight.detach().numpy().T, expected, rtol=1e-3, atol=1e-5)
