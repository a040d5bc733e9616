"""Conformal intervals: calibrated on validation windows only, reaching their stated coverage."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import make_frame, tiny_config, write_csv

from tsformer.evaluate import format_report
from tsformer.intervals import (
    SCALE_FLOOR,
    calibrate,
    calibration_scale,
    context_change,
    coverage,
    forecast_scale,
    half_widths,
    label,
    typical_scale,
    window_scale,
)
from tsformer.predictor import load_predictor
from tsformer.runs import evaluate_run
from tsformer.train import train


def test_the_half_width_is_the_conformal_rank_of_the_validation_errors():
    errors = torch.arange(1.0, 10.0).view(9, 1, 1)  # n = 9 absolute errors 1..9
    widths = calibrate(torch.zeros(9, 1, 1), errors, None, (0.5, 0.8, 0.95))
    assert widths[:, 0, 0].tolist() == [5.0, 8.0, 9.0]  # ceil(10 a)-th smallest: 5th, 8th, 10th -> the largest


def test_unobserved_validation_cells_are_left_out():
    truth = torch.tensor([1.0, 2.0, 3.0, 100.0]).view(4, 1, 1)
    observed = torch.tensor([True, True, True, False]).view(4, 1, 1)
    assert calibrate(torch.zeros(4, 1, 1), truth, observed, (0.5,)).item() == 2.0  # ceil(4 * 0.5) = 2nd of 1, 2, 3


def test_known_noise_reaches_the_nominal_coverage():
    """Forecast 0, truth N(0, 1): the 80 % half-width is near 1.28 and covers 80 % of fresh draws, within 2 points."""
    generator = torch.Generator().manual_seed(0)
    validation = torch.randn(4000, 3, 2, generator=generator)
    widths = calibrate(torch.zeros_like(validation), validation, None, (0.8, 0.95))
    assert widths[0].numpy() == pytest.approx(np.full((3, 2), 1.2816), abs=0.08)
    assert widths[1].numpy() == pytest.approx(np.full((3, 2), 1.96), abs=0.12)
    test = torch.randn(4000, 3, 2, generator=generator)
    for level, width in zip((0.8, 0.95), widths, strict=True):
        share, count = coverage(-width, width, test, None)
        assert share == pytest.approx(np.full(2, level), abs=0.02) and count.tolist() == [12000, 12000]


def test_the_context_change_is_the_mean_seasonal_change_over_observed_pairs():
    values = [0.0, 1.0, 3.0, 0.0, 5.0, 1.0, 2.0]
    context = torch.tensor([values, [2.0] * 7]).T[None]  # (1, L 7, C 2)
    # season 2: |3 - 0|, |0 - 1|, |5 - 3|, |1 - 0|, |2 - 5| -> mean 2; a flat column -> 0
    assert context_change(context, None, season=2)[0].tolist() == pytest.approx([2.0, 0.0])
    observed = torch.ones(1, 7, 2, dtype=torch.bool)
    observed[0, 2, 0] = False  # drops the two pairs through x2 = 3: 1, 1 and 3 are left
    assert context_change(context, observed, season=2)[0, 0].item() == pytest.approx(5 / 3)
    observed[0, 3, 0] = False  # one pair left, fewer than the lag: too short for a scale of its own
    assert torch.isnan(context_change(context, observed, season=2)[0, 0])
    assert context_change(context, None, season=24)[0, 0].item() == pytest.approx(16 / 6)  # too long: lag 1


def test_short_and_flat_windows_take_the_typical_validation_scale():
    change = torch.tensor([[1.0], [2.0], [4.0], [float("nan")], [0.0], [3.0]], dtype=torch.float64)  # (N 6, C 1)
    typical = typical_scale(change)  # the median of 1, 2, 4, 0, 3
    assert typical.tolist() == pytest.approx([2.0])
    scale = window_scale(change, typical)[:, 0].tolist()
    assert scale == pytest.approx([1.0, 2.0, 4.0, 2.0, SCALE_FLOOR * 2.0, 3.0])  # short: typical; flat: the floor
    assert typical_scale(torch.full((3, 1), float("nan"))).tolist() == [1.0]  # no window with a scale


def test_scaled_calibration_divides_each_windows_errors_by_its_scale():
    truth = torch.tensor([2.0, 4.0, 30.0, 8.0]).view(4, 1, 1)
    scale = torch.tensor([1.0, 2.0, 10.0, 4.0]).view(4, 1)  # errors / scale: 2, 2, 3, 2
    widths = calibrate(torch.zeros(4, 1, 1), truth, None, (0.5, 0.95), scale)
    assert widths[:, 0, 0].tolist() == [2.0, 3.0]
    per_window = half_widths(widths, scale)  # (levels, N, H, C)
    assert per_window.shape == (2, 4, 1, 1) and per_window[0, :, 0, 0].tolist() == [2.0, 4.0, 20.0, 8.0]
    assert half_widths(widths, None).shape == (2, 1, 1, 1)


def test_scaled_intervals_hold_their_coverage_in_calm_and_volatile_stretches():
    """Noise in proportion to the context's own change: a fixed width over-covers the calm windows and
    under-covers the volatile ones; widths scaled by each window's context cover 80 % of both, within 3 points."""
    generator = torch.Generator().manual_seed(0)

    def draw(n):
        sigma = torch.where(torch.arange(n) % 2 == 0, 0.2, 2.0)  # (N,) calm and volatile windows
        context = torch.randn(n, 48, 1, generator=generator) * sigma[:, None, None]  # (N, L, C)
        truth = torch.randn(n, 3, 1, generator=generator) * sigma[:, None, None]  # (N, H, C), forecast 0
        return context, truth, sigma

    context, truth, _ = draw(4000)
    fixed = calibrate(torch.zeros_like(truth), truth, None, (0.8,))
    scale, typical = calibration_scale("seasonal", context, None, season=1)
    scaled = calibrate(torch.zeros_like(truth), truth, None, (0.8,), scale)
    context, truth, sigma = draw(4000)
    test_scale = forecast_scale(typical, context, None, season=1)
    for calm in (True, False):
        keep = (sigma < 1) == calm
        fixed_share, _ = coverage(-fixed[0], fixed[0], truth[keep], None)
        scaled_width = half_widths(scaled, test_scale[keep])[0]
        scaled_share, _ = coverage(-scaled_width, scaled_width, truth[keep], None)
        assert scaled_share[0] == pytest.approx(0.8, abs=0.03)
        assert (fixed_share[0] > 0.95) if calm else (fixed_share[0] < 0.7)


def test_interval_widths_read_each_windows_seasonal_change_and_never_its_targets(tiny_csv, tmp_path):
    """Context 48 of hourly data: each test window's half-widths are the calibrated widths times the mean
    |x_t - x_(t - 24)| of its own context, and stay the same after every target value is redrawn."""
    from tsformer.candidates import season_for
    from tsformer.data import training_data

    cfg = tiny_config(tiny_csv, context_len=48)
    train(cfg, tmp_path / "run", show_progress=False)
    ckpt = load_predictor(tmp_path / "run" / "model.pt")
    windows = training_data(cfg).split_windows("test").split(cfg.model.context_len)
    season = season_for(ckpt.freq, cfg.model.context_len)
    assert season == 24
    widths = ckpt.calibration.half_widths(windows)  # (levels, N, H, C)
    context = windows.context.double().numpy()  # (N, L, C)
    change = np.abs(context[:, 24:] - context[:, :-24]).mean(axis=1)  # (N, C), by hand
    expected = ckpt.calibration.widths.numpy()[:, None] * change[None, :, None, :]
    np.testing.assert_allclose(widths, expected, rtol=1e-5)
    redrawn = windows._replace(target=100 * torch.randn_like(windows.target))
    np.testing.assert_array_equal(widths, ckpt.calibration.half_widths(redrawn))


def test_fixed_intervals_are_one_width_per_step(tiny_csv, tmp_path):
    import dataclasses

    cfg = tiny_config(tiny_csv)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, interval_scale="fixed"))
    train(cfg, tmp_path / "run", show_progress=False)
    ckpt = load_predictor(tmp_path / "run" / "model.pt")
    from tsformer.data import training_data

    windows = training_data(cfg).split_windows("test").split(cfg.model.context_len)
    widths = ckpt.calibration.half_widths(windows)
    assert widths.shape == (2, 1, cfg.model.horizon, 2)
    np.testing.assert_array_equal(widths[:, 0], ckpt.calibration.widths.numpy())


def test_labels():
    assert [label(level) for level in (0.8, 0.95, 0.975, 0.5)] == ["80", "95", "97.5", "50"]


def test_calibration_never_reads_the_test_split(tmp_path):
    """Test rows changed beyond recognition leave the fallback choice and the intervals exactly as they were."""
    frame = make_frame()
    original = write_csv(tmp_path / "original.csv", frame)
    changed_frame = frame.copy()
    changed_frame.loc[192:, ["a", "b"]] = changed_frame.loc[192:, ["a", "b"]] * 50 + 7  # the test targets (70/10/20)
    changed = write_csv(tmp_path / "changed.csv", changed_frame)
    train(tiny_config(original), tmp_path / "a", show_progress=False)
    train(tiny_config(changed), tmp_path / "b", show_progress=False)
    a, b = load_predictor(tmp_path / "a" / "model.pt"), load_predictor(tmp_path / "b" / "model.pt")
    assert a.interval_levels == b.interval_levels == (0.8, 0.95)
    assert torch.equal(a.calibration.widths, b.calibration.widths) and a.fallback == b.fallback
    report = evaluate_run(tmp_path / "a", write=False)
    assert set(report.intervals) == {"80", "95"} and 0 <= report.intervals["80"]["coverage"] <= 1
    assert report.intervals["80"]["width"] < report.intervals["95"]["width"]
    assert "80 % interval (conformal, calibrated on validation): coverage" in format_report(report)


def test_interval_levels_from_the_command_line(tiny_csv, tmp_path):
    from helpers import TINY_FLAGS
    from typer.testing import CliRunner

    from tsformer.cli import app

    run = tmp_path / "run"
    argv = ["train", str(tiny_csv), "--out", str(run), "--quiet", *TINY_FLAGS, "--interval", "0.5", "--interval", "0.9"]
    assert CliRunner().invoke(app, argv).exit_code == 0
    assert load_predictor(run / "model.pt").interval_levels == (0.5, 0.9)
    bad = CliRunner().invoke(app, ["train", str(tiny_csv), "--out", str(tmp_path / "x"), "--interval", "1.5"])
    assert bad.exit_code == 2 and "train.intervals must be distinct levels in (0, 1), got [1.5]" in bad.stderr


def test_msis_against_a_hand_computation():
    from tsformer.intervals import msis

    forecast = np.zeros((1, 3, 1))  # (N, H, C), scaled
    truth = np.array([[[0.5], [2.0], [-3.0]]])  # inside, 1 above, 2 below an interval of +-1
    width = np.ones((3, 1))
    std, scale = np.array([[2.0]]), np.array([[4.0]])  # scaled -> units: x 2; MASE scale 4 units
    # per step: width 2 + 2/0.05 x miss = 2, 2 + 40 x 1, 2 + 40 x 2 (scaled) -> x 2 / 4
    expected = np.mean([2, 42, 82]) * 2 / 4
    lower, upper = forecast - width, forecast + width
    assert msis(lower, upper, truth, None, std, scale, 0.95) == pytest.approx(expected)
    observed = np.array([[[True], [False], [True]]])
    assert msis(lower, upper, truth, observed, std, scale, 0.95) == pytest.approx(np.mean([2, 82]) * 2 / 4)
    # a floor at 0 (scaled) lifts the lower bound to 0: the width shrinks to 1 and the third miss grows to 3
    floored = np.maximum(lower, 0.0)
    assert msis(floored, upper, truth, None, std, scale, 0.95) == pytest.approx(np.mean([1, 41, 121]) * 2 / 4)


def test_quantile_loss_against_a_hand_computation():
    from tsformer.intervals import interval_bounds, interval_quantiles, quantile_loss

    forecast = np.array([[[10.0], [10.0]]])  # (1, 2, 1), scaled = units (mean 0, std 1)
    truth = np.array([[[12.0], [9.0]]])
    widths = np.array([[[1.0], [1.0]]])  # one level (0.8): quantiles 0.1 at 9, 0.9 at 11
    mean, std = np.zeros((1, 1)), np.ones((1, 1))

    def pinball(q, y, f):
        return max(q * (y - f), (q - 1) * (y - f))

    total = 12 + 9
    expected = np.mean(
        [
            2 * (pinball(0.5, 12, 10) + pinball(0.5, 9, 10)) / total,
            2 * (pinball(0.1, 12, 9) + pinball(0.1, 9, 9)) / total,
            2 * (pinball(0.9, 12, 11) + pinball(0.9, 9, 11)) / total,
        ]
    )
    implied = interval_quantiles(forecast, interval_bounds(forecast, widths, (0.8,)))
    assert [q for q, _ in implied] == pytest.approx([0.1, 0.5, 0.9])
    assert quantile_loss(implied, truth, None, mean, std) == pytest.approx(expected)


def test_seasonal_naive_intervals_come_from_its_in_sample_errors(tiny_csv):
    from tsformer.data import training_data
    from tsformer.evaluate import seasonal_naive_widths

    data = training_data(tiny_config(tiny_csv))
    widths = seasonal_naive_widths(data, season=2, horizon=4, levels=(0.8, 0.95))  # (levels, series, H, C)
    assert widths.shape == (2, 1, 4, 2)
    train = data.frame.values[:168].astype(np.float64)  # the training rows (70 % of 240)
    for h, lag in enumerate([2, 2, 4, 4]):  # season 2: steps 1-2 repeat lag 2, steps 3-4 lag 4
        errors = np.abs(train[lag:] - train[:-lag])
        expected = np.quantile(errors, 0.8, axis=0) / data.scaler.std[0]
        np.testing.assert_allclose(widths[0, 0, h], expected, rtol=1e-5)
    assert (widths[1] >= widths[0]).all()


def test_evaluate_reports_seasonal_naive_intervals_beside_the_models(tiny_csv, tmp_path):
    train(tiny_config(tiny_csv), tmp_path / "run", show_progress=False)
    report = evaluate_run(tmp_path / "run", write=False)
    naive = report.intervals["80"]["seasonal_naive"]
    assert 0 <= naive["coverage"] <= 1 and naive["width"] > 0 and naive["msis"] > 0
    assert "seasonal naive's 80 % interval (from its in-sample errors)" in format_report(report)


def test_a_level_is_held_only_with_the_calibration_errors_it_needs():
    from tsformer.intervals import errors_needed

    assert [errors_needed(level) for level in (0.5, 0.75, 0.8, 0.9, 0.95, 0.99)] == [1, 3, 4, 9, 19, 99]


def test_no_half_width_is_narrower_than_the_floor():
    truth = torch.zeros(5, 3, 1)  # (N, H, C)
    forecast = torch.zeros(5, 3, 1)
    forecast[:, 1:] = torch.arange(1.0, 6.0).view(5, 1, 1)  # step 0 exact every time: errors 0
    widths = calibrate(forecast, truth, None, (0.8,), floor=0.1)
    assert widths[0, 0, 0] == pytest.approx(0.1) and widths[0, 1, 0] == pytest.approx(5.0)
    assert calibrate(forecast, truth, None, (0.8,))[0, 0, 0] == 0  # without a floor it would claim certainty


def test_levels_the_validation_windows_cannot_hold_are_left_out_with_one_note(tmp_path):
    """A monthly series of 144 rows, horizon 12: three validation windows. The 80 % and 95 % intervals would both
    be the largest validation error (identical bands); they are left out, and train, predict and evaluate say so.
    With 12 windows the 80 % interval is held and the 95 % is still left out."""
    from tsformer.evaluate import format_report
    from tsformer.runs import evaluate_run, predict_run

    n = 144
    t = np.arange(n)
    frame = pd.DataFrame({
        "date": pd.date_range("2012-01-01", periods=n, freq="MS").strftime("%Y-%m-%d"),
        "y": 100 + t + 10 * np.sin(2 * np.pi * t / 12) + np.random.default_rng(0).normal(0, 2, n),
    })  # fmt: skip
    csv = write_csv(tmp_path / "monthly.csv", frame)
    cfg = tiny_config(csv, context_len=24, horizon=12, patch_len=12)
    predictor = train(cfg, tmp_path / "run", show_progress=False)
    note = (
        "intervals: 80 %, 95 % left out: split-conformal calibration holds a level only with enough validation "
        "windows (4 for 80 %, 19 for 95 %), and this run has 3; give more validation rows (data.split_ratios, or "
        "longer series), or a level up to 75 % (--interval 0.75)"
    )
    assert predictor.calibration.levels == () and note in predictor.summary.lines
    forecast = predict_run(tmp_path / "run", csv)
    assert not [c for c in forecast.frame.columns if "lower" in c] and note in forecast.notes
    assert note in format_report(evaluate_run(tmp_path / "run", write=False))

    more = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, split_ratios=(0.6, 0.16, 0.2)))
    held = train(more, tmp_path / "more", show_progress=False)  # 23 validation rows: 12 windows
    assert held.calibration.levels == (0.8,) and held.calibration.unsupported == ((0.95, 19),)
    columns = predict_run(tmp_path / "more", csv).frame.columns
    assert "y_lower_80" in columns and "y_lower_95" not in columns
