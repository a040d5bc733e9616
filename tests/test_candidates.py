"""tsformer.candidates: the classical forecasters beside the model, from each window's context alone."""

from __future__ import annotations

import math

import pytest
import torch

from tsformer.candidates import (
    BUILT_IN,
    CANDIDATES,
    candidate_forecasts,
    candidate_names,
    drift_per_step,
    first_observed,
    repeats,
    season_for,
    week_for,
)
from tsformer.fallback import decide

HORIZON = 6


def seasonal_trend(n_steps: int, season: int = 4, slope: float = 0.5) -> torch.Tensor:
    """(1, n_steps, 1): a repeating pattern of `season` steps on a straight line."""
    t = torch.arange(n_steps, dtype=torch.float64)
    pattern = torch.tensor([0.0, 3.0, -1.0, 2.0], dtype=torch.float64)[:season].repeat(n_steps // season + 1)
    return (slope * t + pattern[:n_steps]).view(1, -1, 1)


def test_drift_continues_a_straight_line_and_seasonal_drift_a_trending_season():
    line = (2.0 * torch.arange(12, dtype=torch.float64) + 1).view(1, -1, 1)
    forecasts = candidate_forecasts(line, None, HORIZON, season=4)
    expected = 2.0 * torch.arange(12, 12 + HORIZON, dtype=torch.float64) + 1
    torch.testing.assert_close(forecasts["drift"][0, :, 0], expected)
    assert (forecasts["repeat_last"][0, :, 0] == 23.0).all()
    plain = candidate_forecasts(seasonal_trend(24, slope=0.0), None, HORIZON, season=4)
    torch.testing.assert_close(
        plain["seasonal_naive"][0, :, 0], torch.tensor([0.0, 3, -1, 2, 0, 3], dtype=torch.float64)
    )


def test_the_drift_starts_at_each_columns_first_observed_value():
    context = torch.tensor([[0.0, 0.0, 5.0, 6.0, 7.0, 8.0]], dtype=torch.float64).view(1, 6, 1)
    observed = torch.tensor([[False, False, True, True, True, True]]).view(1, 6, 1)
    assert drift_per_step(context, first_observed(context, observed)).item() == 1.0  # (8 - 5) / 3: no padding
    assert drift_per_step(context, first_observed(context, None)).item() == pytest.approx(8 / 5)
    alone = torch.tensor([[False] * 5 + [True]]).view(1, 6, 1)
    assert drift_per_step(context, first_observed(context, alone)).item() == 0.0  # no change to measure
    # seasonal: from the mean of the first two observed steps (5.5) to that of the last two (7.5), 2 apart
    assert drift_per_step(context, first_observed(context, observed), season=2).item() == 1.0


def test_a_season_without_a_trend_has_no_seasonal_drift_whatever_its_endpoints():
    season = seasonal_trend(26, slope=0.0)  # ends mid-season: its first and last values differ
    forecasts = candidate_forecasts(season, None, HORIZON, season=4)
    torch.testing.assert_close(forecasts["seasonal_drift"], forecasts["seasonal_naive"])
    assert forecasts["drift"][0, 0, 0] != forecasts["repeat_last"][0, 0, 0]  # the plain drift reads the endpoints
    trend = candidate_forecasts(seasonal_trend(24, slope=0.5), None, HORIZON, season=4)
    torch.testing.assert_close(
        trend["seasonal_drift"] - trend["seasonal_naive"], 0.5 * torch.arange(1.0, 7).view(1, -1, 1).double()
    )


def test_weekly_candidates_exist_below_a_day_where_the_context_reaches_a_week():
    assert (week_for("h", 336), week_for("h", 167), week_for("15min", 672), week_for("D", 400)) == (168, 0, 672, 0)
    assert week_for("MS", 100) == 0 and week_for("B", 100) == 0
    assert candidate_names("h", 336) == BUILT_IN and candidate_names("h", 336, CANDIDATES, linear=True) == CANDIDATES
    assert "linear" not in candidate_names("h", 336, CANDIDATES)  # a run without a fitted linear candidate
    assert candidate_names("h", 48) == ("repeat_last", "seasonal_naive", "drift", "seasonal_drift")
    context = seasonal_trend(336, slope=0.0).float()
    assert set(candidate_forecasts(context, None, HORIZON, 4, week=168)) == set(BUILT_IN)
    assert "weekly_naive" not in candidate_forecasts(context, None, HORIZON, 4)


def test_a_seasonal_series_with_a_trend_picks_seasonal_naive_with_drift_over_repeat_last():
    """Issue 19: on validation windows of a trending season, the fallback ships seasonal naive with drift
    (the model here forecasts badly on purpose)."""
    series = seasonal_trend(80)
    contexts = torch.stack([series[0, s : s + 40] for s in range(0, 30, 3)])  # (10, 40, 1)
    truth = torch.stack([series[0, s + 40 : s + 40 + HORIZON] for s in range(0, 30, 3)])  # (10, H, 1)
    forecasts = candidate_forecasts(contexts, None, HORIZON, season=4)
    forecasts["model"] = torch.zeros_like(truth)
    decision = decide(forecasts, truth, None, ("y",))
    assert decision.choice == (("seasonal_drift",),)
    mse = {name: decision.val_error[name][0, 0] for name in decision.names}
    assert mse["seasonal_drift"] < mse["seasonal_naive"] / 4 and mse["seasonal_naive"] < mse["repeat_last"]
    singles = ("repeat_last", "seasonal_naive", "drift", "seasonal_drift")
    assert decision.names == ("model", *singles, *(f"blend_{name}" for name in singles))  # and their blends
    assert not math.isnan(decision.val_error["drift"][0, 0])


def test_train_candidates_limits_what_the_fallback_scores(tmp_path):
    from helpers import make_frame, tiny_config

    from tsformer.config import apply_overrides
    from tsformer.errors import ConfigError
    from tsformer.train import train

    with pytest.raises(ConfigError, match="train.candidates must be distinct names among repeat_last"):
        apply_overrides(tiny_config(), ["train.candidates=arima"])
    cfg = apply_overrides(tiny_config(), ["train.candidates=seasonal_naive,seasonal_drift"])
    assert candidate_names("h", 168, cfg.train.candidates) == ("seasonal_naive", "seasonal_drift")
    predictor = train(cfg, tmp_path / "run", show_progress=False, source=make_frame(240))
    windows = predictor.read().split_windows("val").split(predictor.context_len)
    assert tuple(predictor.forecasters(windows)[0]) == ("model", "seasonal_naive", "seasonal_drift")
    assert predictor.fallback.names == ("model", "seasonal_naive", "seasonal_drift")  # nothing else weighed


def test_at_season_1_seasonal_naive_and_its_drift_repeat_repeat_last_and_drift():
    assert repeats(1) == {"seasonal_naive": "repeat_last", "seasonal_drift": "drift"}
    assert repeats(24) == repeats(4) == {}
    yearly = seasonal_trend(12, slope=0.3)
    forecasts = candidate_forecasts(yearly, None, HORIZON, season=season_for("YS", 12))
    torch.testing.assert_close(forecasts["seasonal_naive"], forecasts["repeat_last"])
    torch.testing.assert_close(forecasts["seasonal_drift"], forecasts["drift"])
