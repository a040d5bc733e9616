import numpy as np
import pytest
import torch
from helpers import tiny_config

from tsformer.config import ModelConfig
from tsformer.data import Scaler, prepare
from tsformer.errors import LeakageError
from tsformer.leakage import check_model, check_scaler, check_windows, require_passed
from tsformer.model import Forecaster, attention, normalisation

CONFIGS = [
    dict(patch_len=4),
    dict(patch_len=1, context_len=12),
    dict(patch_len=5),  # context not a whole number of patches: a left-padded first token
    dict(patch_len=4, channel_independent=False),
    dict(patch_len=4, norm="first_patch"),
    dict(patch_len=4, norm="none", attention="explicit"),
    dict(patch_len=4, head="token", context_skip=False, stats_features=False),
]


def model_for(**overrides) -> Forecaster:
    fields = dict(context_len=22, horizon=3, d_model=16, n_heads=2, d_ff=16, n_layers=2, dropout=0.1)
    fields.update(overrides)
    torch.manual_seed(0)
    return Forecaster(ModelConfig(**fields), n_series=2)


def by_name(results):
    return {r.name: r for r in results}


@pytest.mark.parametrize("overrides", CONFIGS)
def test_causal_models_pass(overrides):
    results = by_name(check_model(model_for(**overrides)))
    assert all(r.passed for r in results.values()), [r.line() for r in results.values()]
    assert results["model/forward"].max_change == 0.0
    assert results["model/sensitive"].max_change > 1e-3


def test_removing_the_causal_mask_fails(monkeypatch):
    monkeypatch.setattr(attention, "causal_mask", lambda n, device=None: torch.ones(n, n, dtype=torch.bool))
    results = by_name(check_model(model_for(patch_len=4)))
    assert not results["model/forward"].passed and results["model/forward"].max_change > 1e-3
    assert not results["model/gradient"].passed
    with pytest.raises(LeakageError, match="model/forward"):
        require_passed(list(results.values()))


def test_non_causal_normalisation_fails(monkeypatch):
    def whole_window_stats(values, mask, patch_len, norm):
        n_tokens = values.shape[1] // patch_len
        mean = values.mean(1, keepdim=True).expand(-1, n_tokens, -1)  # peeks at every step
        std = values.std(1, keepdim=True).expand(-1, n_tokens, -1) + 1e-5
        return mean, std

    monkeypatch.setattr(normalisation, "instance_stats", whole_window_stats)
    results = by_name(check_model(model_for(patch_len=4)))
    assert not results["model/forward"].passed
    assert not results["model/gradient"].passed


def test_scaler_fit_on_all_rows_fails(tiny_csv):
    data = prepare(tiny_config(tiny_csv))
    assert check_scaler(data.frame.values, data.borders, data.scaler).passed
    leaky = Scaler.fit(data.frame.values)
    result = check_scaler(data.frame.values, data.borders, leaky)
    assert not result.passed and result.max_change > 1e-4


def test_window_checks_pass_and_catch_a_shifted_window(tiny_csv, monkeypatch):
    data = prepare(tiny_config(tiny_csv))
    assert all(r.passed for r in check_windows(data.frame.timestamps, data.borders, 16, 4))

    import tsformer.leakage as leakage
    from tsformer.data import split

    def overlapping_targets(split_name, borders, context_len, horizon):
        first, end = borders.target_range(split_name)
        first = max(first, context_len) - (2 if split_name != "train" else 0)  # starts inside the previous split
        return np.arange(first, end - horizon + 1)

    monkeypatch.setattr(leakage, "window_target_starts", overlapping_targets)
    results = by_name(check_windows(data.frame.timestamps, data.borders, 16, 4))
    assert not results["data/splits"].passed
    assert split.window_target_starts is not overlapping_targets  # only the checked path was broken


def test_window_targets_overlapping_inputs_fail(tiny_csv, monkeypatch):
    data = prepare(tiny_config(tiny_csv))
    import tsformer.leakage as leakage

    real_make_windows = leakage.make_windows

    def inputs_end_at_the_last_target(values, starts, context_len, horizon):
        real = real_make_windows(values, starts, context_len, horizon)  # rows [s - L, s + H)
        return torch.cat([real[:, horizon:], real[:, context_len:]], dim=1)  # inputs [s - L + H, s + H)

    monkeypatch.setattr(leakage, "make_windows", inputs_end_at_the_last_target)
    results = by_name(check_windows(data.frame.timestamps, data.borders, 16, 4))
    assert not results["data/window"].passed
