"""The validation score that chooses epochs and recipes (`metrics.validation_score`)."""

import math

import numpy as np
import pytest
import torch

from tsformer.metrics import PANEL_SCORE_FLOOR, mase_scale, score, squared_error_sums, validation_score


def test_sums_count_only_observed_steps():
    forecast = torch.zeros(2, 3, 1)
    target = torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]]).view(2, 3, 1)
    observed = torch.tensor([[True, False, True], [True, True, True]]).view(2, 3, 1)
    sums, counts = squared_error_sums(forecast, target, observed)
    assert sums[:, 0].tolist() == [10.0, 3.0] and counts[:, 0].tolist() == [2.0, 3.0]
    sums, counts = squared_error_sums(forecast, target, None)
    assert sums[:, 0].tolist() == [14.0, 3.0] and counts[:, 0].tolist() == [3.0, 3.0]


def test_one_series_scores_its_mse():
    sums, counts = torch.tensor([[4.0, 1.0], [2.0, 9.0]]), torch.full((2, 2), 2.0)
    score = validation_score(sums, counts, np.zeros(2, dtype=np.int64), 1)
    assert score.score == score.mse == pytest.approx(16 / 8)


def test_a_panel_scores_the_geometric_mean_of_each_series_and_columns_mse():
    # series 0: two windows, column MSE (1 + 3) / 4 = 1 and (8 + 8) / 4 = 4; series 1: one window, 100 and 0.25;
    # series 2 has no window; series 1's second column observes nothing in a second window (left out of its count)
    sums = torch.tensor([[1.0, 8.0], [3.0, 8.0], [200.0, 0.5], [0.0, 0.0]])
    counts = torch.tensor([[2.0, 2.0], [2.0, 2.0], [2.0, 2.0], [2.0, 0.0]])
    series = np.array([0, 0, 1, 1])
    score = validation_score(sums, counts, series, 3)
    series_1_first = 200.0 / 4  # two windows of two steps
    assert score.score == pytest.approx(math.prod([1.0, 4.0, series_1_first, 0.25]) ** 0.25)
    assert score.mse == pytest.approx(220.5 / 14)
    # a scale-free judge: one series' errors a hundred times larger move its score, not the others' weight
    louder = sums.clone()
    louder[2:] *= 100
    assert validation_score(louder, counts, series, 3).score == pytest.approx(score.score * 100**0.5)


def test_a_solved_series_counts_at_the_floor():
    sums, counts = torch.tensor([[0.0], [4.0]]), torch.ones(2, 1)
    score = validation_score(sums, counts, np.array([0, 1]), 2)
    assert score.score == pytest.approx(math.sqrt(PANEL_SCORE_FLOOR * 4.0))


def test_nothing_observed_scores_zero():
    score = validation_score(torch.zeros(2, 1), torch.zeros(2, 1), np.array([0, 1]), 2)
    assert (score.score, score.mse) == (0.0, 0.0)


def test_mase_is_undefined_without_a_scale_and_left_out_of_the_mean():
    """One training row (or a constant one) has no seasonal-naive error to scale by: NaN, not 1 in the data's
    units (which let series of large values decide a panel's MASE), and the mean runs over the others."""
    assert np.isnan(mase_scale(np.array([[5.0]]), 12)).all()
    assert np.isnan(mase_scale(np.full((20, 1), 3.0), 12)).all()
    np.testing.assert_allclose(mase_scale(np.array([[1.0], [3.0], [6.0]]), 12), [2.5])  # lag 1: too short for 12
    forecast, truth = np.zeros((2, 1, 1)), np.array([[[2.0]], [[8.0]]])  # (N, H, C), scaled = units
    scales = np.array([[2.0], [np.nan]])  # the second window's series has no scale
    scored = score(forecast, truth, np.zeros((2, 1)), np.ones((2, 1)), ("y",), scales)["mean"]
    assert scored["mase"] == pytest.approx(1.0) and scored["mae_original"] == pytest.approx(5.0)
    two = score(np.zeros((2, 1, 2)), np.ones((2, 1, 2)), np.zeros((2, 2)), np.ones((2, 2)), ("a", "b"),
                np.array([[2.0, np.nan], [2.0, np.nan]]))["mean"]  # fmt: skip
    assert two["mase"] == pytest.approx(0.5)  # column b has no scale: the mean over columns is a's
