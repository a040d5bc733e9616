"""Quantile forecasts: the pinball loss, no crossing, conformal adjustment, causality, and the CLI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import TINY_FLAGS, layout_of, tiny_config
from test_cli_errors import invoke

from tsformer.intervals import adjust_quantiles, calibrate_quantiles, quantile_pairs
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


def test_conformal_adjustment_reaches_the_nominal_coverage_on_new_draws():
    """Quantiles far too narrow for N(0, 1) noise are widened on 'validation' draws; fresh draws are then
    covered at the nominal 80 % within 2 points (4,000 draws per step and column)."""
    rng = np.random.default_rng(0)
    shape = (4000, 3, 2)  # (N, H, C)
    narrow = torch.zeros(*shape, 3)
    narrow[..., 0], narrow[..., 2] = -0.2, 0.2  # quantiles 0.1, 0.5, 0.9 of a much narrower distribution
    levels = torch.tensor([0.1, 0.5, 0.9])
    pairs = quantile_pairs((0.1, 0.5, 0.9))
    assert pairs == [(0, 2)]
    adjust = calibrate_quantiles(narrow, torch.from_numpy(rng.standard_normal(shape)), None, pairs, levels)
    adjusted = adjust_quantiles(narrow, adjust, pairs)
    fresh = torch.from_numpy(rng.standard_normal(shape)).float()
    covered = ((adjusted[..., 0] <= fresh) & (fresh <= adjusted[..., 2])).float().mean(dim=0)  # (H, C)
    assert ((covered - 0.8).abs() < 0.02).all(), covered
    assert torch.allclose(adjust, torch.full_like(adjust, 1.2816 - 0.2), atol=0.08)  # N(0,1)'s 0.9 quantile


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
    assert ckpt.config.train.quantiles == (0.1, 0.5, 0.9) and ckpt.calibration.quantile_adjust.shape == (1, 4, 2)
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
    assert invoke("train", tiny_csv, "--out", tmp_path / "bad", "--quantiles", "0.1,1.5", *TINY_FLAGS).exit_code == 2
