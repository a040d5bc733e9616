"""The linear candidate (tsformer.model.linear_candidate): the context skip alone, fitted in closed form on the
training windows and weighed beside the model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import tiny_config

import tsformer
from tsformer.api import fit
from tsformer.candidates import BUILT_IN
from tsformer.check import check_linear, check_linear_choice
from tsformer.config import LINEAR_RIDGES
from tsformer.data import Prepared, training_data
from tsformer.errors import CheckpointError
from tsformer.final import every_row
from tsformer.model import build_forecaster, linear_candidate
from tsformer.search import ValidationTargets


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


def config(linear: bool = True, final_fit: bool = True, **train):
    cfg = tiny_config(context_len=8, horizon=4, patch_len=4)
    candidates = (*BUILT_IN, "linear") if linear else BUILT_IN
    return dataclasses.replace(
        cfg,
        data=dataclasses.replace(cfg.data, calendar=False),
        train=dataclasses.replace(cfg.train, candidates=candidates, final_fit=final_fit, **train),
    )


def test_skip_rows_square_to_the_training_loss_of_the_skip_alone():
    """Each row's squared error under the skip's weights is that token's MSE in the loss the model trains on (head,
    cycle and future skip at zero), so the least-squares fit minimises the training loss of the skip alone."""
    data = training_data(config(), trends())
    torch.manual_seed(0)
    model = build_forecaster(data.config.model, data.layout, "mse")
    start = linear_candidate.fit(model, data.split_windows("train"), seed=0)
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
    start = linear_candidate.fit(model, windows, seed=0)
    every = windows.take(torch.arange(len(windows)))
    split = every.split(start.cfg.context_len)
    inputs, rows = start.skip_rows(
        split.context, split.context_observed, start.token_targets(every.target), start.token_targets(every.observed)
    )
    a, b = inputs.double().numpy(), rows.double().numpy()
    ridge = linear_candidate.RIDGE * np.diag(a.T @ a).mean()
    expected = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ b)  # (T*P, H), by hand
    np.testing.assert_allclose(start.context_skip.linear.weight.detach().numpy().T, expected, rtol=1e-3, atol=1e-5)
    assert start.head is None and start.projection is None  # no Transformer: forecasting it costs the skip alone
    assert model.context_skip.linear.weight.abs().sum() == 0  # the model is only read for its configuration


def test_a_panel_of_trends_weighs_the_linear_candidate_and_the_final_fit_fits_it_again():
    predictor = fit(trends(), horizon=4, config=config())
    assert predictor.fallback.names == ("model", "repeat_last", "drift", "linear")  # yearly: season 1, no repeats
    weight = predictor.fallback.values[..., predictor.fallback.names.index("linear")]  # (n_series, 1)
    assert (weight == 1.0).sum() == 3  # validation picks it for three series (drift, exact on a line, for the rest)
    assert predictor.summary.lines[0].startswith("linear candidate: the model's context skip alone")
    assert "the linear map in 3 of 12 series" in predictor.summary.lines[1]
    held_out, final = predictor.linear, predictor.final.linear
    assert not torch.equal(held_out.context_skip.linear.weight, final.context_skip.linear.weight)  # every row
    assert "and the linear candidate fitted again on them" in predictor.summary.lines[-1]
    shipped, _ = predictor.for_origins(predictor.read().frame)
    assert shipped.linear is final and shipped.model is predictor.final.model
    forecast = predictor.predict()
    assert len(forecast) == 12 * 4 and np.isfinite(forecast["y"]).all()
    without = fit(trends(), horizon=4, config=config(linear=False))
    assert without.linear is None and "linear" not in without.fallback.names
    mse = predictor.evaluate().set_index("forecaster")["mse"]
    assert mse["seasonal_naive"] == mse["repeat_last"]  # reported beside the others, weighed once
    assert mse["linear"] < mse["model_alone"] / 100  # the test split: the linear map forecasts trends far better


def test_the_linear_candidate_is_saved_and_read_back(tmp_path):
    predictor = fit(trends(), horizon=4, config=config())
    loaded = tsformer.load(predictor.save(tmp_path / "run"))
    for stored, read in [(predictor.linear, loaded.linear), (predictor.final.linear, loaded.final.linear)]:
        assert torch.equal(stored.context_skip.linear.weight, read.context_skip.linear.weight)
    pd.testing.assert_frame_equal(loaded.predict(trends()), predictor.predict())


def test_test_rows_replaced_by_noise_leave_the_linear_candidate_and_the_choices_as_they_were():
    frame = trends()
    noisy = frame.copy()
    test_rows = noisy.groupby("unique_id", sort=False).cumcount(ascending=False) < 4  # each series' last 4 (test)
    noisy.loc[test_rows, "y"] = np.random.default_rng(1).normal(size=int(test_rows.sum())) * 100
    first = fit(frame, horizon=4, config=config(final_fit=False))
    second = fit(noisy, horizon=4, config=config(final_fit=False))
    assert torch.equal(first.linear.context_skip.linear.weight, second.linear.context_skip.linear.weight)
    assert first.fallback == second.fallback


@pytest.mark.parametrize("quantiles", [(), (0.1, 0.9)])
def test_a_model_with_a_quantile_head_has_no_linear_candidate(quantiles):
    data = training_data(config(), trends())
    model = build_forecaster(data.config.model, data.layout, "mse", quantiles)
    assert linear_candidate.applies(model) is (not quantiles)
    if quantiles:
        predictor = fit(trends(), horizon=4, config=config(final_fit=False, quantiles=quantiles))
        assert predictor.linear is None and "linear" not in predictor.fallback.names


def fitting_on_every_row(original):
    """A deliberate break of the fit: Prepared.split_windows giving training windows from every row."""

    def split_windows(self, split, stride=1):
        return original(every_row(self), split, stride) if split == "train" else original(self, split, stride)

    return split_windows


def choosing_on_test(original):
    """A deliberate break of the choice of rows: Prepared.split_windows giving test windows for validation."""

    def split_windows(self, split, stride=1):
        return original(self, "test" if split == "val" else split, stride)

    return split_windows


def holding_windows_a_horizon_later(original):
    """A deliberate break of the ridge's choice alone: linear_candidate.normal_equations scoring the ridges on the
    held windows moved a horizon later (the last ones' targets in the validation rows), the fit's sums as they were."""

    def normal_equations(model, windows, seed, rows, choosing=True):
        sums = original(model, windows, seed, rows, choosing)
        if not choosing:
            return sums
        later = original(model, dataclasses.replace(windows, starts=windows.starts + windows.horizon), seed, rows)
        return dataclasses.replace(sums, held=later.held)

    return normal_equations


@pytest.mark.parametrize(
    ("check", "owner", "name", "leak"),
    [
        (check_linear, Prepared, "split_windows", fitting_on_every_row),
        (check_linear, linear_candidate, "normal_equations", holding_windows_a_horizon_later),
        (check_linear_choice, Prepared, "split_windows", choosing_on_test),
    ],
)
def test_check_proves_the_linear_candidate_and_its_rows_read_nothing_later(monkeypatch, check, owner, name, leak):
    """linear/rows: fitted, and its ridge chosen, on the training rows alone; linear/choice: its rows chosen on
    the validation rows."""
    predictor = fit(trends(), horizon=4, config=config(final_fit=False))
    data = predictor.read()
    result = check(predictor, data)
    assert result.passed and result.max_change == 0.0
    monkeypatch.setattr(owner, name, leak(getattr(owner, name)))
    broken = check(predictor, data)
    assert not broken.passed and broken.max_change > 1e-3


def test_each_member_of_an_ensemble_fits_its_own_context():
    """Members reading 8 and 4 steps: each skip solves the normal equations of its own rows, the shorter member's
    from the last 4 steps of each context."""
    cfg = config()
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, members=2, member_contexts=(8, 4)))
    data = training_data(cfg, trends())
    windows = data.split_windows("train")
    torch.manual_seed(0)
    start = linear_candidate.fit(build_forecaster(data.config.model, data.layout, "mse"), windows, 0)
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
        ridge = linear_candidate.RIDGE * np.diag(a.T @ a).mean()
        expected = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ b)
        assert member.cfg.context_len == 8 - offset
        np.testing.assert_allclose(member.context_skip.linear.weight.detach().numpy().T, expected, rtol=1e-3, atol=1e-5)


def test_the_last_tokens_rows_are_the_every_token_rows_of_the_last_token_and_solve_their_normal_equations():
    data = training_data(config(), trends())
    windows = data.split_windows("train")
    torch.manual_seed(0)
    model = build_forecaster(data.config.model, data.layout, "mse")

    def rows_of(batch, last_token=False):
        split = batch.split(windows.context_len)
        observed = None if batch.observed is None else model.token_targets(batch.observed)
        targets = model.token_targets(batch.target)
        return model.skip_rows(split.context, split.context_observed, targets, observed, last_token)

    unpadded = windows.take(torch.nonzero(windows.starts - windows.context_len >= windows.floors).flatten())
    all_inputs, all_rows = rows_of(unpadded)  # every token of these holds steps: one row each, token by token
    last = torch.arange(len(all_inputs)).view(-1, model.n_tokens)[:, -1]
    inputs, rows = rows_of(unpadded, last_token=True)
    torch.testing.assert_close(inputs, all_inputs[last])
    torch.testing.assert_close(rows, all_rows[last])
    inputs, rows = rows_of(windows.take(torch.arange(len(windows))), last_token=True)
    assert len(inputs) == len(windows)  # every window's last token holds steps
    batch = windows.take(torch.arange(5))
    split = batch.split(windows.context_len)
    unseen = torch.ones_like(batch.target, dtype=torch.bool)
    unseen[2, -1] = False  # window 2's last target step is missing: its row has nothing to fit to
    kept, _ = model.skip_rows(
        split.context, split.context_observed, model.token_targets(batch.target), model.token_targets(unseen), True
    )
    torch.testing.assert_close(kept, inputs[[0, 1, 3, 4]])
    fitted = linear_candidate.fit(model, windows, seed=0, rows="last_token")
    a, b = inputs.double().numpy(), rows.double().numpy()
    ridge = linear_candidate.RIDGE * np.diag(a.T @ a).mean()
    expected = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ b)
    np.testing.assert_allclose(fitted.context_skip.linear.weight.detach().numpy().T, expected, rtol=1e-3, atol=1e-5)
    with pytest.raises(ValueError, match="fits on one of"):
        linear_candidate.fit(model, windows, seed=0, rows="auto")


def noisy_cycle(n_rows: int, period: int, freq: str, noise: float) -> pd.DataFrame:
    """ds, y: a cycle of `period` steps under noise (seed 0)."""
    t = np.arange(n_rows)
    y = np.sin(2 * np.pi * t / period) + noise * np.random.default_rng(0).normal(size=n_rows)
    return pd.DataFrame({"ds": pd.date_range("2000-01-01", periods=n_rows, freq=freq), "y": y})


@pytest.mark.parametrize(
    ("frame", "context_len", "patch_len", "expected"),
    [
        # 40 windows for 24 inputs: a strong prior, and the forecast's own rows (validation 0.31 against 0.92)
        (noisy_cycle(70, 12, "MS", 0.5), 24, 4, ("last_token", 1.0)),
        # many windows of a noisy cycle: every token's rows and a strong prior average the noise best (0.182)
        (noisy_cycle(1500, 24, "h", 0.3), 48, 12, ("every_token", 1.0)),
        # many windows of a clean one: the forecast's own rows, a slight ridge (0.0058 against 0.0066)
        (noisy_cycle(1500, 24, "h", 0.05), 48, 12, ("last_token", 0.1)),
    ],
)
def test_auto_keeps_the_rows_scoring_lower_on_validation_each_with_the_ridge_its_training_rows_chose(
    frame, context_len, patch_len, expected
):
    cfg = tiny_config(context_len=context_len, horizon=4, patch_len=patch_len)
    cfg = dataclasses.replace(
        cfg,
        data=dataclasses.replace(cfg.data, calendar=False),
        train=dataclasses.replace(cfg.train, candidates=(*BUILT_IN, "linear"), final_fit=False),
    )
    predictor = fit(frame, horizon=4, config=cfg)
    chosen = (predictor.config.train.linear_rows, predictor.config.train.linear_ridge)
    assert chosen == expected
    data = predictor.read()
    train = data.split_windows("train")
    val = data.split_windows("val")
    windows = val.split(predictor.context_len)
    targets = ValidationTargets.of_windows(val, windows)
    scores = {}
    for rows in linear_candidate.ROWS:
        seed = predictor.config.train.seed
        ridge, held = linear_candidate.choose_ridge(
            linear_candidate.normal_equations(predictor.model, train, seed, rows)
        )
        assert set(held) == set(LINEAR_RIDGES) and max(held.values()) > min(held.values())
        linear = linear_candidate.fit(predictor.model, train, seed, rows, ridge)
        scores[rows] = targets.score(torch.cat(list(linear.predict_batches(windows.context, windows.context_observed))))
        if rows == chosen[0]:
            assert ridge == chosen[1]
            assert torch.equal(linear.context_skip.linear.weight, predictor.linear.context_skip.linear.weight)
    assert scores[chosen[0]] == min(scores.values()) and scores[chosen[0]] != max(scores.values())
    assert f"with ridge {chosen[1]:g} (chosen on each series' last fifth" in predictor.summary.lines[0]
    assert f"validation score {scores[chosen[0]]:.4g} against" in predictor.summary.lines[0]
    assert check_linear(predictor, data).passed  # the check refits with the chosen rows and ridge


def test_the_ridge_is_scored_on_each_series_last_fifth_by_a_fit_of_windows_whose_targets_end_before_it():
    data = training_data(config(), trends())  # 12 series
    windows = data.split_windows("train")
    torch.manual_seed(0)
    model = build_forecaster(data.config.model, data.layout, "mse")
    for stride in (1, 3):  # strided windows (train.train_stride): the last fifth of those there are
        strided = windows.every(stride)
        early, held = linear_candidate._early_and_held(strided)
        series = strided.series()
        for k in range(12):
            starts = strided.starts[series == k]
            n_held = int(np.ceil(0.2 * len(starts)))
            assert held[series == k].sum() == n_held and starts[held[series == k]].min() == starts[-n_held]
            assert starts[early[series == k]].max() + windows.horizon <= starts[held[series == k]].min()
            assert starts[early[series == k]].max() + windows.horizon + stride > starts[held[series == k]].min()
    early, held = linear_candidate._early_and_held(windows)
    equations = linear_candidate.normal_equations(model, windows, 0, "every_token")
    torch.testing.assert_close(
        equations.members[0].early_gram
        + linear_candidate.normal_equations(model, windows.subset(~early), 0, "every_token").members[0].gram,
        equations.members[0].gram,
    )
    member = linear_candidate.shell(model.cfg, model.layout)

    def rows_of(index, last_token):
        batch = windows.take(torch.nonzero(index).flatten())
        split = batch.split(windows.context_len)
        targets = member.token_targets(batch.target)
        inputs, rows = member.skip_rows(split.context, split.context_observed, targets, None, last_token)
        return inputs.double().numpy(), rows.double().numpy()

    a, b = rows_of(early, False)
    ridge = 0.1 * np.diag(a.T @ a).mean()
    weights = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ b)  # the early fit, by hand
    a_held, b_held = rows_of(held, True)  # what the held windows' forecasts read
    by_hand = ((a_held @ weights - b_held) ** 2).mean()
    assert linear_candidate.held_mse(equations, 0.1) == pytest.approx(by_hand, rel=1e-6)


def test_an_ensembles_ridge_is_scored_on_its_members_mean_forecast_of_the_held_windows():
    """Members reading 8 and 4 steps: the held MSE is that of the mean of the members' forecasts, each member fitted
    on the early windows by hand (not the members' own MSEs summed)."""
    cfg = config()
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, members=2, member_contexts=(8, 4)))
    data = training_data(cfg, trends())
    windows = data.split_windows("train")
    torch.manual_seed(0)
    model = build_forecaster(data.config.model, data.layout, "mse")
    early, held = linear_candidate._early_and_held(windows)
    equations = linear_candidate.normal_equations(model, windows, 0, "last_token")
    linear = linear_candidate.shell(model.cfg, model.layout)

    def rows_of(member, offset, index):
        batch = windows.take(torch.nonzero(index).flatten())
        split = batch.split(windows.context_len)
        targets = member.token_targets(batch.target[:, offset:])  # every target observed
        padded = split.context_observed  # the earliest contexts are padded (a mask), the later ones not (None)
        observed = None if padded is None else padded[:, offset:]
        inputs, rows = member.skip_rows(split.context[:, offset:], observed, targets, None, last_token=True)
        return inputs.double().numpy(), rows.double().numpy()

    forecasts = []
    for member, offset in zip(linear.members, (0, 4), strict=True):
        a, b = rows_of(member, offset, early)
        weights = np.linalg.solve(a.T @ a + 0.1 * np.diag(a.T @ a).mean() * np.eye(a.shape[1]), a.T @ b)
        a_held, b_held = rows_of(member, offset, held)
        forecasts.append(a_held @ weights - b_held)  # the member's forecast less the target, row by row
    by_hand = (np.mean(forecasts, axis=0) ** 2).mean()
    assert linear_candidate.held_mse(equations, 0.1) == pytest.approx(by_hand, rel=1e-6)


def test_the_final_fit_and_the_run_folder_keep_the_chosen_rows_and_ridge(tmp_path):
    cfg = tiny_config(context_len=48, horizon=4, patch_len=12)
    cfg = dataclasses.replace(
        cfg,
        data=dataclasses.replace(cfg.data, calendar=False),
        train=dataclasses.replace(cfg.train, candidates=(*BUILT_IN, "linear"), final_fit=True),
    )
    frame = noisy_cycle(1500, 24, "h", 0.05)
    predictor = fit(frame, horizon=4, config=cfg, out=tmp_path / "run")
    assert (predictor.config.train.linear_rows, predictor.config.train.linear_ridge) == ("last_token", 0.1)
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "linear_rows: last_token" in saved and "linear_ridge: 0.1" in saved
    windows = every_row(predictor.read()).split_windows("train")
    again = linear_candidate.fit(predictor.final.model, windows, predictor.config.train.seed, "last_token", 0.1)
    assert torch.equal(again.context_skip.linear.weight, predictor.final.linear.context_skip.linear.weight)


def test_a_run_from_before_the_choice_reads_as_fitted_on_every_token_with_the_old_ridge(tmp_path):
    given = config(final_fit=False, linear_rows="every_token", linear_ridge=linear_candidate.RIDGE)
    predictor = fit(trends(), horizon=4, config=given)
    assert predictor.config.train.linear_rows == "every_token" and "validation score" not in predictor.summary.lines[0]
    path = predictor.save(tmp_path / "run")
    payload = torch.load(path / "model.pt", weights_only=True)
    payload["format_version"] = 11
    del payload["config"]["train"]["linear_rows"], payload["config"]["train"]["linear_ridge"]
    torch.save(payload, path / "model.pt")
    old = tsformer.load(path)
    assert (old.config.train.linear_rows, old.config.train.linear_ridge) == ("every_token", linear_candidate.RIDGE)
    assert check_linear(old, old.read(trends())).passed
    payload["format_version"] = 12
    payload["config"]["train"]["linear_rows"] = "auto"  # unresolved: which rows the candidate was fitted on is lost
    torch.save(payload, path / "model.pt")
    with pytest.raises(CheckpointError, match="damaged tsformer checkpoint.*train.linear_rows"):
        tsformer.load(path)
    payload["format_version"] = 13
    payload["config"]["train"].update(linear_rows="every_token", linear_ridge=None)  # and its ridge
    torch.save(payload, path / "model.pt")
    with pytest.raises(CheckpointError, match="damaged tsformer checkpoint.*train.linear_ridge"):
        tsformer.load(path)
