"""tsformer.intermittent: Croston (SBA) and TSB, counted from each window's zero, and when train makes them
candidates."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from tsformer.candidates import candidate_forecasts
from tsformer.config import Config, DataConfig, ModelConfig, TrainConfig
from tsformer.data.choices import choice_split, intermittent_share, resolve_from_data
from tsformer.data.loader import read_series
from tsformer.intermittent import intermittent_forecasts

HORIZON = 3


def column(*values: float) -> torch.Tensor:
    """(1, L, 1) float64."""
    return torch.tensor(values, dtype=torch.float64).view(1, -1, 1)


def zeros_of(n: int = 1) -> torch.Tensor:
    return torch.zeros(n, 1, 1, dtype=torch.float64)


def test_croston_sba_and_tsb_against_a_hand_computation():
    out = intermittent_forecasts(column(0, 2, 0, 0, 4), None, zeros_of(), HORIZON)
    # sizes 2 then 4: 2 + 0.1 (4 - 2) = 2.2; intervals 2 (from the start) then 3: 2 + 0.1 (3 - 2) = 2.1
    torch.testing.assert_close(out["croston"], torch.full((1, HORIZON, 1), 0.95 * 2.2 / 2.1, dtype=torch.float64))
    # the probability from the first step's 0: 0.1, 0.09, 0.081, then 0.081 + 0.1 (1 - 0.081) = 0.1729
    torch.testing.assert_close(out["tsb"], torch.full((1, HORIZON, 1), 0.1729 * 2.2, dtype=torch.float64))


def test_a_sale_after_a_quiet_stretch_is_a_rate_not_a_level_and_tsb_fades_while_nothing_sells():
    history = [3, 0] * 10 + [0] * 40  # a sale of 3 every other step, then 40 quiet steps

    def first_step(context: torch.Tensor) -> dict[str, float]:
        out = candidate_forecasts(context, None, HORIZON, 1, intermittent=("croston", "tsb"), zero=zeros_of())
        return {name: float(forecast[0, 0, 0]) for name, forecast in out.items()}

    stopped, sold = first_step(column(*history)), first_step(column(*history, 5))
    # while nothing sells, Croston keeps its rate (a size of 3 every 1.6 steps) and TSB's probability fades
    assert stopped["croston"] == pytest.approx(0.95 * 3 / (2 - 0.9**9), rel=1e-6)
    assert stopped["tsb"] < 0.05 * stopped["croston"]
    # a sale of 5 after 41 quiet steps (42 since the last): repeat-last forecasts a sale every step, Croston and
    # TSB a rate below one
    assert sold["repeat_last"] == 5.0
    interval = 2 - 0.9**9 + 0.1 * (42 - (2 - 0.9**9))
    assert sold["croston"] == pytest.approx(0.95 * 3.2 / interval, rel=1e-6)
    assert 0.2 < sold["tsb"] < sold["croston"] < 0.6


def test_no_demand_forecasts_zero_and_a_column_without_a_zero_repeats_its_last_value():
    out = intermittent_forecasts(column(0, 0, 0, 0), None, zeros_of(), HORIZON)
    assert out["croston"].abs().max() == 0 and out["tsb"].abs().max() == 0
    level = column(4.0, 5.0, 6.0)
    no_floor = intermittent_forecasts(level, None, torch.full((1, 1, 1), -torch.inf, dtype=torch.float64), HORIZON)
    assert no_floor["croston"][0, :, 0].tolist() == no_floor["tsb"][0, :, 0].tolist() == [6.0] * HORIZON


def test_scaled_values_forecast_the_scaled_counts():
    counts = column(0, 1, 0, 3, 0, 0, 2, 0)
    mean, std = 0.75, 1.1
    scaled = intermittent_forecasts((counts - mean) / std, None, zeros_of() - mean / std, HORIZON)
    raw = intermittent_forecasts(counts, None, zeros_of(), HORIZON)
    for name in ("croston", "tsb"):
        torch.testing.assert_close(scaled[name] * std + mean, raw[name])


def test_unobserved_steps_are_neither_demand_nor_zero():
    with_gap = column(0, 2, 9, 9, 0, 4)  # the two 9s unobserved (a forward fill would repeat the 2)
    observed = torch.tensor([True, True, False, False, True, True]).view(1, -1, 1)
    gapped = intermittent_forecasts(with_gap, observed, zeros_of(), HORIZON)
    dropped = intermittent_forecasts(column(0, 2, 0, 4), None, zeros_of(), HORIZON)
    for name in ("croston", "tsb"):
        torch.testing.assert_close(gapped[name], dropped[name])


def test_they_read_only_the_context():
    rng = np.random.default_rng(0)
    counts = torch.tensor(
        np.where(rng.random((4, 30, 2)) < 0.3, rng.integers(1, 5, (4, 30, 2)), 0), dtype=torch.float64
    )
    before = intermittent_forecasts(counts[:, :20], None, zeros_of(4).expand(-1, -1, 2), HORIZON)
    changed = counts.clone()
    changed[:, 20:] = 100.0  # what follows the context
    after = intermittent_forecasts(changed[:, :20], None, zeros_of(4).expand(-1, -1, 2), HORIZON)
    for name in before:
        assert torch.equal(before[name], after[name])


def retail(n_days: int = 300, seed: int = 0) -> pd.DataFrame:
    """A long file of products: two selling a unit or two on about one day in five, one selling every day."""
    rng = np.random.default_rng(seed)
    days = pd.date_range("2024-01-01", periods=n_days, freq="D").strftime("%Y-%m-%d")
    sales = {
        "slow_a": np.where(rng.random(n_days) < 0.2, rng.integers(1, 3, n_days), 0),
        "slow_b": np.where(rng.random(n_days) < 0.2, rng.integers(1, 3, n_days), 0),
        "fast": rng.poisson(20, n_days) + 1,
    }
    return pd.concat(pd.DataFrame({"item": item, "day": days, "sold": y}) for item, y in sales.items())


def test_train_names_them_for_intermittent_demand_without_adding_them():
    cfg = Config(model=ModelConfig(horizon=7), data=DataConfig(id_cols=("item",)))
    chosen, notes = resolve_from_data(cfg, read_series(retail(), cfg.data))
    assert "croston" not in chosen.train.candidates  # they won no validation yet (benchmarks/NOTES.md)
    frame = read_series(retail(), cfg.data)
    floored, share = intermittent_share(chosen, frame, choice_split(chosen, frame)[1])
    assert floored.tolist() == [True] and 0.75 < share < 0.85  # about 80 % of a slow product's days sell nothing
    given = ",".join(chosen.train.candidates)
    assert notes[-1].endswith(
        f"; demand is intermittent (up to {share:.0%} of a series' training values zero): --candidates "
        f"{given},croston,tsb adds Croston and TSB"
    )
    fast = retail().query("item == 'fast'")
    assert "intermittent" not in resolve_from_data(cfg, read_series(fast, cfg.data))[1][-1]
    unfloored = Config(model=ModelConfig(horizon=7), data=DataConfig(id_cols=("item",), floor="none"))
    assert "intermittent" not in resolve_from_data(unfloored, read_series(retail(), cfg.data))[1][-1]


def test_asked_for_without_a_zero_to_count_from_they_are_left_out_with_a_note():
    frame = retail().assign(sold=lambda t: t["sold"] - 1)  # goes down to -1: no floor
    cfg = Config(
        model=ModelConfig(horizon=7),
        data=DataConfig(id_cols=("item",)),
        train=TrainConfig(candidates=("repeat_last", "croston", "tsb")),
    )
    chosen, notes = resolve_from_data(cfg, read_series(frame, cfg.data))
    assert chosen.train.candidates == ("repeat_last",)
    assert notes[-1] == (
        "candidates: croston and tsb left out, as column 'sold' has no floor at zero to count demand from (its "
        "training values go down to -1); if it cannot go below zero, train with --set data.floor=zero"
    )
    given = resolve_from_data(cfg, read_series(retail(), cfg.data))  # floored: kept, nothing said
    assert given[0].train.candidates == cfg.train.candidates and "croston" not in given[1][-1]


def test_a_small_demand_at_a_large_scale_is_a_demand():
    from tsformer.data.split import Scaler

    counts = np.zeros((120, 1))
    counts[::10], counts[55] = 1.0, 300_000.0  # a sale of 1 every ten steps and one large order: std 27,272
    scaler = Scaler.fit(counts)
    scaled = torch.from_numpy(scaler.transform(counts)).unsqueeze(0).double()  # (1, 120, 1)
    zero = torch.from_numpy(scaler.floors("zero")).view(1, 1, 1).double()
    out = intermittent_forecasts(scaled, None, zero, HORIZON)
    raw = intermittent_forecasts(torch.from_numpy(counts).unsqueeze(0), None, zeros_of(), HORIZON)
    for name in ("croston", "tsb"):
        torch.testing.assert_close(out[name] * float(scaler.std[0, 0]) + float(scaler.mean[0, 0]), raw[name])


def test_a_trained_predictor_weighs_them_and_the_leakage_check_probes_them(tmp_path):
    from helpers import tiny_config

    from tsformer.candidates import BUILT_IN
    from tsformer.check import check_forecasters
    from tsformer.config import apply_overrides
    from tsformer.train import train

    rng = np.random.default_rng(0)
    hours = pd.date_range("2024-01-01", periods=240, freq="h").strftime("%Y-%m-%d %H:%M:%S")
    sales = {name: np.where(rng.random(240) < 0.2, rng.integers(1, 4, 240), 0) for name in ("a", "b")}
    candidates = ",".join((*BUILT_IN, "croston", "tsb"))
    cfg = apply_overrides(tiny_config(), [f"train.candidates={candidates}"])
    predictor = train(cfg, tmp_path / "run", show_progress=False, source=pd.DataFrame({"date": hours, **sales}))
    assert predictor.fallback.names[-2:] == ("croston", "tsb")
    data = predictor.read()
    val = data.split_windows("val")
    windows = val.split(predictor.context_len)
    each, _ = predictor.forecasters(windows, predictor.floors(val.series()))
    # flat rates in units: above zero, below the largest sale
    rates = each["croston"] * torch.from_numpy(data.scaler.std[0]) + torch.from_numpy(data.scaler.mean[0])
    assert (rates[:, 1:] == rates[:, :1]).all() and 0 < rates.min() and rates.max() < 3
    result = check_forecasters(predictor, data)
    assert result.passed and "by the model and 6 candidates" in result.detail
