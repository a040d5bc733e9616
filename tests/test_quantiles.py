"""Quantile forecasts: the pinball loss, no crossing, conformal adjustment, causality, and the CLI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import TINY_FLAGS, layout_of, tiny_config
from test_cli_errors import invoke

from tsformer.intervals import (
    adjust_quantiles,
    calibrate_quantiles,
    pair_shifts,
    quantile_pairs,
    shipped_quantiles,
    weight_groups,
)
from tsformer.leakage import check_model, token_outputs
from tsformer.model import Forecaster
from tsformer.model.forecaster import pinball_loss
from tsformer.predictor import load_predictor


def test_pinball_loss_against_a_hand_computation():
    quantiles = torch.tensor([[[1.0, 2.0, 3.0]], [[0.0, 0.5, 4.0]]])  # (2 cells, 1, Q=3)
    target = torch.tensor([[2.5], [1.0]])
    levels = torch.tensor([0.1, 0.5, 0.9])

    def pinball(q, y, f):
        return max(q * (y - f), (q - 1) * (y - f))

    cells = [(2.5, [1.0, 2.0, 3.0]), (1.0, [0.0, 0.5, 4.0])]
    expected = np.mean([pinball(q, y, f) for y, fs in cells for q, f in zip([0.1, 0.5, 0.9], fs, strict=True)])
    assert pinball_loss(quantiles, target, levels).item() == pytest.approx(expected)
    weights = torch.tensor([[1.0], [0.0]])  # the second cell unobserved
    first = np.mean([pinball(q, 2.5, f) for q, f in zip([0.1, 0.5, 0.9], [1.0, 2.0, 3.0], strict=True)])
    assert pinball_loss(quantiles, target, levels, weights).item() == pytest.approx(first)


def quantile_model() -> Forecaster:
    return Forecaster(tiny_config().model, layout_of(2), quantiles=(0.9, 0.1, 0.5)).eval()


def test_quantiles_never_cross_whatever_the_weights():
    model = quantile_model()
    with torch.no_grad():
        for weight in model.quantile_head.parameters():
            weight.copy_(10 * torch.randn(weight.shape))  # offsets in every order
    x = torch.randn(8, 16, 2)
    point, quantiles = model.outputs_tokens(x)
    assert quantiles.shape == (8, 4, 4, 2, 3) and model.quantile_levels.tolist() == pytest.approx([0.1, 0.5, 0.9])
    assert (quantiles.diff(dim=-1) >= 0).all()
    assert (model.predict_quantiles(x).diff(dim=-1) >= 0).all()


def test_conformal_shifts_reach_each_level_on_new_draws():
    """Quantiles far too narrow for N(0, 1) noise, and all above the point (a short training's head), are moved
    on 'validation' draws; on fresh draws each then has its own share of the truth below it within 2 points, and
    the pair (0.1, 0.9) covers 80 % (4,000 draws per step and column, one group)."""
    rng = np.random.default_rng(0)
    shape = (4000, 3, 2)  # (N, H, C)
    biased = torch.zeros(*shape, 3)
    biased[..., 0], biased[..., 1], biased[..., 2] = 0.5, 0.6, 0.7  # quantiles 0.1, 0.5, 0.9 of a narrow, high law
    levels, weight = torch.tensor([0.1, 0.5, 0.9]), torch.ones(4000, 2)  # the model alone, its point at 0
    truth = torch.from_numpy(rng.standard_normal(shape))
    shifts = calibrate_quantiles(torch.zeros(shape), biased, weight, truth, None, levels)
    assert shifts.shape == (3, 3, 3, 2)  # (groups, Q, H, C)
    adjusted = adjust_quantiles(biased, shifts, weight_groups(weight))
    fresh = torch.from_numpy(rng.standard_normal(shape)).float()
    for k, level in enumerate((0.1, 0.5, 0.9)):
        below = (fresh <= adjusted[..., k]).float().mean(dim=0)  # (H, C)
        assert ((below - level).abs() < 0.02).all(), (level, below)
    covered = ((adjusted[..., 0] <= fresh) & (fresh <= adjusted[..., 2])).float().mean(dim=0)
    assert ((covered - 0.8).abs() < 0.03).all(), covered
    expected = torch.tensor([-1.2816 - 0.5, -0.6, 1.2816 - 0.7])  # N(0, 1)'s quantiles less each quantile
    assert torch.allclose(shifts[1, :, 0, 0], expected, atol=0.08)
    normal = torch.tensor([-1.2816, 0.0, 1.2816])  # no window of their own: every window's at their weight
    assert torch.allclose(shifts[0, :, 0, 0], normal, atol=0.08)  # the point alone (weight 0)
    assert torch.allclose(shifts[2, :, 0, 0], normal - torch.tensor([0.25, 0.3, 0.35]), atol=0.08)  # half


def test_shifts_per_unit_of_each_windows_scale_follow_a_calmer_stretch():
    """Noise whose spread is each window's scale (as a context's seasonal change tracks it): calibrated on volatile
    'validation' windows (scale 3) and applied to calm ones (scale 1), shifts in scaled units give a band three
    times too wide (the pair covers almost everything), shifts per unit of the scale cover 80 % again."""
    rng = np.random.default_rng(2)
    shape = (4000, 2, 1)
    zero = torch.zeros(*shape, 3)  # quantiles 0.1, 0.5, 0.9 at the point: a head that learned nothing
    levels, weight = torch.tensor([0.1, 0.5, 0.9]), torch.ones(4000, 1)
    volatile, calm = torch.full((4000, 1), 3.0), torch.ones(4000, 1)
    truth = torch.from_numpy(3 * rng.standard_normal(shape))
    fresh = torch.from_numpy(rng.standard_normal(shape)).float()
    absolute = calibrate_quantiles(torch.zeros(shape), zero, weight, truth, None, levels)
    per_unit = calibrate_quantiles(torch.zeros(shape), zero, weight, truth, None, levels, volatile)
    assert torch.allclose(per_unit, absolute / 3, atol=1e-6)
    groups = weight_groups(weight)
    for shifts, scale, expected in ((absolute, None, 0.9973), (per_unit, calm, 0.8)):  # P(|Z| < 3 x 1.2816)
        adjusted = adjust_quantiles(zero, shifts, groups, scale)
        covered = ((adjusted[..., 0] <= fresh) & (fresh <= adjusted[..., 2])).float().mean()
        assert abs(covered - expected) < 0.03, (expected, covered)


def test_a_panels_fallen_back_series_get_quantiles_from_their_own_errors():
    """A tenth of the windows ship a candidate alone (weight 0: no model offsets, their point plus shifts), the
    rest the model with offsets that fit N(0, 1): calibrated per group, each group's pair covers 80 % of fresh
    draws. Pooled, the shifts are the model windows' (about 0) and the candidate's pair would cover almost
    nothing (the review's 18 %); so with 5 such windows, too few for their own tails, they take every window's
    shifts made at weight 0, never the model windows'."""
    rng = np.random.default_rng(1)
    n, shape = 4000, (4000, 2, 1)
    normal = torch.tensor([-1.2816, 0.0, 1.2816])
    model_quantiles = normal.expand(*shape, 3).clone()  # offsets around a model point of 0
    point = torch.zeros(shape)
    alone = shipped_quantiles(model_quantiles, point, point, torch.tensor([[0.0]] * 2 + [[1.0]] * (n - 2)))
    assert torch.equal(alone[0], torch.zeros(2, 1, 3)) and torch.equal(alone[-1], model_quantiles[-1])
    levels = torch.tensor([0.1, 0.5, 0.9])
    for few in (n // 10, 5):  # a tenth of the windows, then fewer than the tails need (9): every window's at 0
        weight = torch.ones(n, 1)
        weight[:few] = 0.0
        quantiles = shipped_quantiles(model_quantiles, torch.zeros(shape), point, weight)
        truth = torch.from_numpy(rng.standard_normal(shape))
        shifts = calibrate_quantiles(point, model_quantiles, weight, truth, None, levels)
        adjusted = adjust_quantiles(quantiles, shifts, weight_groups(weight))
        fresh = torch.from_numpy(rng.standard_normal(shape)).float()
        covered = (adjusted[..., 0] <= fresh) & (fresh <= adjusted[..., 2])  # (N, H, C)
        scored = (slice(0, few), slice(few, n)) if few > 9 else (slice(few, n),)  # five windows' is luck: below
        for rows in scored:
            assert abs(covered[rows].float().mean() - 0.8) < 0.04, (few, covered[rows].float().mean())
    assert torch.allclose(shifts[0, :, :, 0], normal[:, None], atol=0.1)  # the five: N(0, 1)'s, not about 0


def test_an_earlier_formats_pair_widening_is_the_same_shifts():
    quantiles = torch.tensor([[[[-1.0, 0.0, 2.0]]]])  # (1, 1, 1, 3)
    widening = torch.tensor([[[0.5]]])  # (1 pair, H, C)
    pairs = quantile_pairs((0.1, 0.5, 0.9))
    shifts = pair_shifts(widening, pairs, 3)
    assert shifts.shape == (3, 3, 1, 1)  # every group alike
    assert adjust_quantiles(quantiles, shifts, torch.tensor([[2]])).flatten().tolist() == [-1.5, 0.0, 2.5]


def test_quantile_outputs_are_audited_and_a_peeking_quantile_fails(monkeypatch):
    model = quantile_model()
    assert all(r.passed for r in check_model(model))
    x = torch.randn(2, 16, 2)
    assert token_outputs(model, x, None, None).shape == (2, 4, 4 * 2 * 4)  # the forecast and 3 quantiles

    real = Forecaster.outputs_tokens

    def quantiles_from_the_next_token(self, x, observed=None, covariates=None):
        point, quantiles = real(self, x, observed, covariates)
        return point, torch.roll(quantiles, shifts=-1, dims=1)  # token k reports token k+1's quantiles

    monkeypatch.setattr(Forecaster, "outputs_tokens", quantiles_from_the_next_token)
    results = {r.name: r for r in check_model(model)}
    assert not results["model/forward"].passed


def test_train_predict_evaluate_with_quantiles(tiny_csv, tmp_path):
    run = tmp_path / "run"
    result = invoke("train", tiny_csv, "--out", run, "--quantiles", "0.1,0.5,0.9", *TINY_FLAGS)
    assert result.exit_code == 0, result.output
    ckpt = load_predictor(run / "model.pt")
    assert ckpt.config.train.quantiles == (0.1, 0.5, 0.9) and ckpt.calibration.quantile_adjust.shape == (3, 3, 4, 2)
    assert ckpt.calibration.quantile_method == "scaled"  # per unit of each window's scale, as the widths are
    out = tmp_path / "forecast.csv"
    assert invoke("predict", run, tiny_csv, "--out", out).exit_code == 0
    forecast = pd.read_csv(out)
    columns = ["a_q0.1", "a_q0.5", "a_q0.9"]
    assert set(columns) <= set(forecast.columns)
    assert (np.diff(forecast[columns].to_numpy(), axis=1) >= 0).all()
    evaluated = invoke("evaluate", run)
    assert "conformally adjusted on validation" in evaluated.stdout and "quantiles 0.1-0.9: cover" in evaluated.stdout
    check = invoke("check", run)
    assert check.exit_code == 0, check.output
    payload = torch.load(run / "model.pt", weights_only=True)
    scaled = load_predictor(run / "model.pt").predict(tiny_csv)
    torch.save(payload | {"format_version": 15, "calibration": payload["calibration"] | {"quantile_method": "groups"}},
               run / "model.pt")  # fmt: skip
    format_15 = load_predictor(run / "model.pt")
    assert format_15.calibration.quantile_method == "groups"  # format 15's shifts: in scaled units
    unscaled = format_15.predict(tiny_csv)
    assert unscaled["a"].equals(scaled["a"]) and not unscaled["a_q0.9"].equals(scaled["a_q0.9"])
    check = invoke("check", run)
    assert check.exit_code == 0 and "calibrated by an earlier format, not remade" in check.stdout, check.output
    # as format 13 stored it: one widening per pair
    payload["format_version"] = 13
    del payload["calibration"]["quantile_method"]
    payload["calibration"]["quantile_adjust"] = torch.full((1, 4, 2), 0.25)
    torch.save(payload, run / "model.pt")
    old = load_predictor(run / "model.pt").calibration
    assert old.quantile_method == "pairs" and old.quantile_adjust[2, :, 0, 0].tolist() == [-0.25, 0.0, 0.25]
    check = invoke("check", run)
    assert check.exit_code == 0 and "calibrated by an earlier format, not remade" in check.stdout, check.output
    payload |= {"format_version": 14}  # format 14: one shift per level, (Q, H, C), around whole offsets
    payload["calibration"] |= {"quantile_method": "each", "quantile_adjust": torch.full((3, 4, 2), 0.5)}
    torch.save(payload, run / "model.pt")
    old = load_predictor(run / "model.pt").calibration
    assert old.quantile_method == "levels" and old.quantile_adjust.shape == (3, 3, 4, 2)
    assert invoke("predict", run, tiny_csv).exit_code == 0
    assert invoke("train", tiny_csv, "--out", tmp_path / "bad", "--quantiles", "0.1,1.5", *TINY_FLAGS).exit_code == 2
