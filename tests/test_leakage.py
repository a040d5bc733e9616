import dataclasses
import importlib

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import layout_of, make_frame, tiny_config, write_csv

from tsformer.config import DataConfig, ModelConfig
from tsformer.data import Scaler, read_series, training_data
from tsformer.errors import LeakageError
from tsformer.leakage import (
    check_data,
    check_fill,
    check_model,
    check_scaler,
    check_windows,
    redrawn_rows,
    require_passed,
)
from tsformer.model import Forecaster, attention, forecaster, normalisation

CONFIGS = [
    dict(patch_len=4),
    dict(patch_len=4, attention="fused"),
    dict(patch_len=1, context_len=12),
    dict(patch_len=5),  # context not a whole number of patches: a left-padded first token
    dict(patch_len=4, channel_independent=False),
    dict(patch_len=4, attention="explicit"),
    dict(patch_len=5, attention="explicit", channel_independent=False),
    dict(patch_len=4, context_skip=False, stats_features=False),
]


def model_for(**overrides) -> Forecaster:
    fields = dict(context_len=22, horizon=3, d_model=16, n_heads=2, d_ff=16, n_layers=2, dropout=0.1)
    fields.update(overrides)
    torch.manual_seed(0)
    return Forecaster(ModelConfig(**fields), layout_of(2))


def by_name(results):
    return {r.name: r for r in results}


@pytest.mark.parametrize("overrides", CONFIGS)
def test_causal_models_pass(overrides):
    results = by_name(check_model(model_for(**overrides)))
    assert all(r.passed for r in results.values()), [r.line() for r in results.values()]
    assert results["model/forward"].max_change == 0.0
    assert results["model/sensitive"].max_change > 1e-3


def forget_the_causal_flag(monkeypatch):
    """The fused kernel called without `is_causal`: with no padding, every token sees the future."""
    fused = torch.nn.functional.scaled_dot_product_attention

    def without_flag(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
        return fused(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", without_flag)


def allow_every_key(monkeypatch):
    """The causal mask replaced by all-True (the explicit path, and the masked path of both)."""
    monkeypatch.setattr(attention, "causal_mask", lambda n, device=None: torch.ones(n, n, dtype=torch.bool))


def mask_only_the_padding(monkeypatch):
    """The padding mask built without its causal part: only contexts with padding see the future."""

    def padding_only(token_real):
        keep_self = torch.eye(token_real.shape[1], dtype=torch.bool)
        return (token_real[:, None, :] | keep_self).unsqueeze(1)  # (N, 1, T, T), no tril

    monkeypatch.setattr(forecaster, "attention_mask", padding_only)


@pytest.mark.parametrize(
    "attention_path, break_it",
    [
        ("fused", forget_the_causal_flag),
        ("explicit", allow_every_key),
        ("fused", mask_only_the_padding),
        ("explicit", mask_only_the_padding),
    ],
)
def test_removing_the_causal_mask_fails(monkeypatch, attention_path, break_it):
    model = model_for(patch_len=4, attention=attention_path)
    assert by_name(check_model(model))["model/forward"].passed
    break_it(monkeypatch)
    results = by_name(check_model(model))
    assert not results["model/forward"].passed and results["model/forward"].max_change > 1e-3
    assert not results["model/gradient"].passed and results["model/gradient"].max_change > 1e-6
    with pytest.raises(LeakageError, match="model/forward"):
        require_passed(list(results.values()))


def test_ignoring_the_observed_mask_fails_the_padding_check(monkeypatch):
    model = model_for(patch_len=4)
    real_sequences = Forecaster._sequences
    monkeypatch.setattr(Forecaster, "_sequences", lambda self, x, observed: real_sequences(self, x, None))
    results = by_name(check_model(model))
    assert not results["model/masked"].passed and results["model/masked"].max_change > 1e-3
    assert results["model/forward"].passed  # the other checks do not see this bug


def test_a_model_blind_to_later_inputs_fails_the_sensitivity_check(monkeypatch):
    model = model_for(patch_len=4)
    real_tokens = Forecaster.outputs_tokens

    def first_token_only(self, x, observed=None, covariates=None):
        keep = torch.zeros_like(x)
        keep[:, : self.token_ends()[0]] = 1.0  # reads the first patch, nothing after it
        return real_tokens(self, x * keep, observed, covariates)

    monkeypatch.setattr(Forecaster, "outputs_tokens", first_token_only)
    results = by_name(check_model(model))
    assert results["model/forward"].passed and results["model/gradient"].passed  # vacuously
    assert not results["model/sensitive"].passed and results["model/sensitive"].max_change == 0.0


def test_non_causal_normalisation_fails(monkeypatch):
    def whole_window_stats(values, mask, patch_len):
        n_tokens = values.shape[1] // patch_len
        mean = values.mean(1, keepdim=True).expand(-1, n_tokens, -1)  # peeks at every step
        std = values.std(1, keepdim=True).expand(-1, n_tokens, -1) + 1e-5
        return mean, std

    monkeypatch.setattr(normalisation, "instance_stats", whole_window_stats)
    results = by_name(check_model(model_for(patch_len=4)))
    assert not results["model/forward"].passed
    assert not results["model/gradient"].passed


def test_scaler_fit_on_all_rows_fails(tiny_csv):
    data = training_data(tiny_config(tiny_csv))
    assert check_scaler(data.frame, data.borders, data.scaler).passed
    leaky = Scaler.fit(data.frame.values)
    result = check_scaler(data.frame, data.borders, leaky)
    assert not result.passed and result.max_change > 1e-4


def test_a_floor_set_from_rows_after_training_fails_the_scaler_check(tiny_csv):
    data = training_data(tiny_config(tiny_csv))
    later_low = dataclasses.replace(data.scaler, lowest=data.scaler.lowest - 0.5)  # a lower value from later rows
    result = check_scaler(data.frame, data.borders, later_low)
    assert not result.passed and result.max_change == pytest.approx(0.5, rel=1e-3)


def test_window_checks_pass_and_catch_a_shifted_window(tiny_csv, monkeypatch):
    data = training_data(tiny_config(tiny_csv))
    assert all(r.passed for r in check_windows(data))

    prepare_module = importlib.import_module("tsformer.data.prepare")  # not the function

    def overlapping_targets(split_name, borders, bounds, min_history, horizon):
        first, end = (int(e[0]) for e in borders.target_range(split_name))
        first = max(first, min_history) - (2 if split_name != "train" else 0)  # starts inside the previous split
        starts = np.arange(first, end - horizon + 1)
        return starts, np.zeros_like(starts)

    monkeypatch.setattr(prepare_module, "window_target_starts", overlapping_targets)
    results = by_name(check_windows(data))
    assert not results["data/splits"].passed
    # Borders 168/192/240: validation targets now start at row 166 and test targets at 190, so rows
    # 166-167 and 190-191 are targets of two splits (4), and 2 windows per split start before it (4).
    assert results["data/splits"].max_change == 8.0
    assert "in two splits (4) or outside their split or series (4)" in results["data/splits"].detail
    assert results["data/window"].passed  # targets still follow their own inputs


def test_window_targets_overlapping_inputs_fail(tiny_csv, monkeypatch):
    data = training_data(tiny_config(tiny_csv))
    windows_module = importlib.import_module("tsformer.data.windows")
    real_gather = windows_module.SeriesInputs.gather

    def inputs_end_at_the_last_target(self, starts, floors, context_len, horizon, device="cpu"):
        real = real_gather(self, starts, floors, context_len, horizon, device)  # rows [s - L, s + H)
        target = torch.cat([real.target[:, horizon:], real.target[:, context_len:]], dim=1)
        return dataclasses.replace(real, target=target)  # inputs [s - L + H, s + H)

    monkeypatch.setattr(windows_module.SeriesInputs, "gather", inputs_end_at_the_last_target)
    results = by_name(check_windows(data))
    assert not results["data/window"].passed


def _holey_frame(tmp_path, method: str):
    """A frame read from a CSV with gaps in both columns, filled by the loader."""
    frame = make_frame(n_rows=120)
    frame.loc[[10, 11, 40, 90], "a"] = np.nan
    frame.loc[[60], "b"] = np.nan
    return read_series(write_csv(tmp_path / "holes.csv", frame), DataConfig(fill=method))


@pytest.mark.parametrize("method", ["ffill", "zero"])
def test_fill_check_passes_on_the_loaders_causal_fills(tmp_path, method):
    result = check_fill(_holey_frame(tmp_path, method), method)
    assert result.passed and result.max_change == 0.0
    assert "5 origins" in result.detail  # just after rows 10, 11, 40, 60 and 90


def test_fill_check_catches_interpolation_across_the_origin(tmp_path, monkeypatch):
    """The old --fill interpolate (both directions) moved inputs before an origin when later rows changed."""
    import tsformer.data.loader as loader
    import tsformer.leakage as leakage

    def interpolate(column, method):
        return pd.Series(column).interpolate(limit_direction="both").to_numpy()

    monkeypatch.setattr(loader, "fill_column", interpolate)
    monkeypatch.setattr(leakage, "fill_column", interpolate)
    result = check_fill(_holey_frame(tmp_path, "ffill"), "ffill")
    assert not result.passed and result.max_change > 1.0


def test_a_leak_in_the_untrained_context_skip_is_caught_through_random_weights(monkeypatch):
    """An untrained skip has zero weights, so a leak there is silent on the model's own weights."""
    original = forecaster.ContextSkip.forward

    def reads_the_next_patch(self, series, mask, mean, std):  # window k ends at token k + 1's end
        shifted = torch.cat([series[:, self.patch_len :], series[:, -self.patch_len :]], dim=1)
        return original(self, shifted, mask, mean, std)

    monkeypatch.setattr(forecaster.ContextSkip, "forward", reads_the_next_patch)
    model = model_for(patch_len=4)
    assert model.context_skip.linear.weight.abs().max() == 0  # untrained: the leak contributes nothing yet
    results = by_name(check_model(model))
    assert not results["model/forward"].passed and not results["model/gradient"].passed


def test_an_inference_path_that_differs_from_the_probed_one_fails():
    """predict computes the last token only; it must be the forward pass the other checks probed."""
    model = model_for(patch_len=4)
    model.context_skip.last = lambda series, mask, mean, std: (
        torch.zeros_like(mean).unsqueeze(1).expand(-1, model.cfg.horizon, -1)
    )  # the last token's skip dropped at inference
    results = by_name(check_model(model))
    assert not results["model/inference"].passed
    assert results["model/forward"].passed  # only the new check sees it


@pytest.mark.parametrize("shift", [-1, 1])
def test_token_targets_misaligned_by_one_step_fail(monkeypatch, shift):
    """A token trained on the horizon one step early (it would see its first target) or late must fail."""
    model = model_for(patch_len=4)
    assert by_name(check_model(model))["model/targets"].passed
    aligned = forecaster.Forecaster.token_targets

    def misaligned(self, window):
        return aligned(self, torch.roll(window, shift, dims=1))

    monkeypatch.setattr(forecaster.Forecaster, "token_targets", misaligned)
    result = by_name(check_model(model))["model/targets"]
    assert not result.passed and result.max_change >= 1.0


def test_the_interval_check_catches_widths_that_read_the_targets():
    from tsformer.leakage import check_intervals

    def from_context(windows):  # (levels 1, N, H, C): the context's mean absolute change, for every step
        return windows.context.diff(dim=1).abs().mean(dim=1)[None, :, None, :].expand(1, -1, 3, -1).numpy()

    def peeking(windows):  # ... plus a little of the truth it is meant to cover
        return from_context(windows) + 0.01 * windows.target.abs()[None].numpy()

    assert check_intervals(from_context, 16, 3, 2).passed
    result = check_intervals(peeking, 16, 3, 2)
    assert not result.passed and result.name == "intervals/future" and result.max_change > 0.1
    assert check_intervals(lambda windows: None, 16, 3, 2).detail == "the run has no intervals"


def _leaking_block(position: int | None = None, only_training: bool = False, only_bfloat16: bool = False):
    """A Block.forward that adds half of the next token's state to a token (every token, or one), always, only
    while training or only under bfloat16 autocast: leaks the model checks must catch."""
    forward = forecaster.Block.forward

    def leaking(self, x, mask):
        out = forward(self, x, mask)
        if (only_training and not self.training) or (only_bfloat16 and not torch.is_autocast_enabled("cpu")):
            return out
        leak = torch.zeros_like(out)
        if position is None:
            leak[:, :-1] = 0.5 * out[:, 1:]
        else:
            leak[:, position] = 0.5 * out[:, position + 1]
        return out + leak

    return leaking


def test_a_leak_only_while_training_is_caught_in_train_mode(monkeypatch):
    monkeypatch.setattr(forecaster.Block, "forward", _leaking_block(only_training=True))
    results = by_name(check_model(model_for(patch_len=4)))
    assert results["model/forward"].passed and results["model/gradient"].passed  # eval mode sees nothing
    assert not results["model/train-mode"].passed and results["model/train-mode"].max_change > 1e-3


def test_a_bfloat16_model_is_probed_in_bfloat16_so_a_leak_only_there_is_caught(monkeypatch):
    assert "model/bfloat16" not in by_name(check_model(model_for(patch_len=4)))  # float32: float64 probes it all
    passed = by_name(check_model(model_for(patch_len=4, precision="bfloat16")))
    assert passed["model/bfloat16"].passed and passed["model/bfloat16"].max_change == 0.0
    monkeypatch.setattr(forecaster.Block, "forward", _leaking_block(only_bfloat16=True))
    results = by_name(check_model(model_for(patch_len=4, precision="bfloat16")))
    assert results["model/forward"].passed and results["model/gradient"].passed  # float64 runs no autocast
    assert not results["model/bfloat16"].passed and results["model/bfloat16"].max_change > 1e-3


def test_every_position_is_probed_so_a_leak_at_one_token_is_caught(monkeypatch):
    model = model_for(patch_len=1, context_len=48)  # 48 tokens: a sample of positions could miss one
    monkeypatch.setattr(forecaster.Block, "forward", _leaking_block(position=2))
    results = by_name(check_model(model))
    assert "over 47 of 48 positions" in results["model/forward"].detail
    assert not results["model/forward"].passed and not results["model/gradient"].passed


def test_the_fast_window_path_is_checked_against_the_gather(tiny_csv, monkeypatch):
    data = training_data(tiny_config(tiny_csv))
    result = by_name(check_windows(data))["data/window-paths"]
    # from the middle of each split to its end: 75 of 149 training windows, 11 of 21 validation, 23 of 45 test
    assert result.passed and result.max_change == 0.0 and "; 109 windows" in result.detail

    windows_module = importlib.import_module("tsformer.data.windows")
    unfolded = windows_module._unfolded

    def one_row_later(block, starts, context_len, horizon):  # a deliberate break: views start a row late
        return unfolded(block, starts + 1, context_len, horizon)

    monkeypatch.setattr(windows_module, "_unfolded", one_row_later)
    result = by_name(check_windows(data))["data/window-paths"]
    assert not result.passed and result.max_change > 0


@pytest.mark.parametrize("level, spread", [(0.01, 1e-5), (25_000_000.0, 100.0)])
def test_the_data_checks_redraw_in_each_columns_own_units(tmp_path, level, spread):
    # a rate of 0.01 moving by 1e-5 (its std about 7e-6): noise of a fixed 1e3 was 1e8 of its standard deviations
    # and tripped the data guard, so such a file could not train at all
    frame = make_frame()
    frame[["a", "b"]] = level + spread * frame[["a", "b"]]
    data = training_data(tiny_config(write_csv(tmp_path / "rate.csv", frame)))
    results = by_name(check_data(data, data.config))
    assert all(r.passed for r in results.values()), [r for r in results.values() if not r.passed]

    later = np.arange(data.frame.n_rows) >= 100
    redrawn = redrawn_rows(data.frame, later, data.scaler, np.random.default_rng(0)).values
    assert np.array_equal(redrawn[:100], data.frame.values[:100])
    far = np.abs(redrawn[100:] - data.scaler.mean[0]) / data.scaler.std[0]  # standard deviations from the mean
    assert 10 < np.median(far) < 1e4 and far.max() < 1e5  # far from the data, inside the guard's 1e6


def test_the_scaled_inputs_are_probed_on_real_rows(tiny_csv, monkeypatch):
    from tsformer.leakage import check_scaled_inputs

    data = training_data(tiny_config(tiny_csv))
    result = check_scaled_inputs(data)
    assert result.passed and result.max_change == 0.0 and "16 origins" in result.detail

    prepare_module = importlib.import_module("tsformer.data.prepare")
    scale = prepare_module._scale

    def adds_half_the_next_row(frame, scaler):  # a deliberate break: each row leans on the next one
        scaled = scale(frame, scaler)
        scaled[:-1] += 0.5 * scaled[1:]
        return scaled

    monkeypatch.setattr(prepare_module, "_scale", adds_half_the_next_row)
    broken = training_data(tiny_config(tiny_csv))  # the whole pipeline scales this way now
    result = check_scaled_inputs(broken)
    assert not result.passed and result.max_change > 1.0
