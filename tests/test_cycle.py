"""The learned cycle (model.cycle): each step's phase from its timestamp, the cycle removed from the
inputs and added to the forecast, what the leakage checks say of it, and the ablation without the
Transformer (model.transformer=false)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import layout_of, make_frame, tiny_config, write_csv

from tsformer.config import ConfigError
from tsformer.data import training_data
from tsformer.data.calendar import cycle_phase, step_numbers
from tsformer.errors import DataError
from tsformer.leakage import check_model
from tsformer.model import Covariates, Forecaster
from tsformer.model import forecaster as forecaster_module
from tsformer.model.cycle import Cycle
from tsformer.predictor import load_predictor
from tsformer.runs import predict_run
from tsformer.train import train

PERIOD = 24


def test_the_phase_is_the_step_count_since_the_epoch_modulo_the_cycle():
    assert layout_of(2, cycle=PERIOD).phase == "cycle24_phase" and layout_of(2).phase == ""
    stamps = pd.DatetimeIndex(["2024-01-01 06:00", "2024-01-03 18:00", "1970-01-02 01:00"])
    np.testing.assert_array_equal(cycle_phase(stamps, "h", PERIOD), [6, 18, 1])
    np.testing.assert_array_equal(
        cycle_phase(stamps, "h", 7),
        [(19723 * 24 + 6) % 7, (19725 * 24 + 18) % 7, 25 % 7],
    )  # 2024-01-01 is day 19723 after the epoch
    berlin = pd.DatetimeIndex(["2024-01-01 06:00"]).tz_localize("Europe/Berlin")  # 05:00 UTC
    assert step_numbers(berlin, "h")[0] % PERIOD == 5
    months = pd.date_range("2024-01-01", periods=3, freq="MS")
    np.testing.assert_array_equal(step_numbers(months, "MS") % 12, [0, 1, 2])
    for freq in ("W-SUN", "QS", "QE", "YE", "YS", "SMS", "SME", "D", "15min"):  # consecutive steps, one apart
        steps = step_numbers(pd.date_range("2023-12-20", periods=6, freq=freq), freq)
        np.testing.assert_array_equal(np.diff(steps), 1, err_msg=freq)
    london = pd.date_range("2024-03-29", periods=4, freq="D", tz="Europe/London")  # over the clock change
    np.testing.assert_array_equal(np.diff(step_numbers(london, "D")), 1)
    seconds = pd.DatetimeIndex(["1500-01-01 05:00"]).as_unit("s")  # outside nanosecond range
    assert step_numbers(seconds, "h")[0] % PERIOD == 5
    with pytest.raises(DataError, match="model.cycle=0"):
        step_numbers(pd.date_range("2024-01-01", periods=3, freq="B"), "B")


def cycle_model(n_features: int = 0, **model) -> Forecaster:
    """Two series; the known-future inputs are `n_features` covariates and the phase."""
    cfg = tiny_config(cycle=PERIOD, **model).model
    return Forecaster(cfg, layout_of(2, n_future=n_features, cycle=cfg.cycle))


def phases(batch: int, length: int, first: int = 5) -> torch.Tensor:
    """(batch, length) the phases of consecutive hourly steps, the first at hour `first`."""
    return ((first + torch.arange(length)) % PERIOD).float().expand(batch, -1)


@pytest.mark.parametrize("context_len, n_features", [(16, 0), (14, 0), (16, 2)])
def test_a_pure_cycle_is_forecast_exactly_by_its_learned_values(context_len, n_features):
    """With Q set to the series' own daily shape, the residual is flat, so the context skip (zero
    weights: the prefix mean) forecasts the level and the cycle adds each future hour's value; also
    with a left pad to whole patches (context 14, patch 4) and with other known-future covariates
    before the phase (their skip starts at zero)."""
    model = cycle_model(n_features, transformer=False, context_len=context_len).double().eval()
    shape = torch.randn(PERIOD, 2, dtype=torch.float64)
    with torch.no_grad():
        model.cycle.values.copy_(shape)
    cfg = model.cfg
    phase = phases(3, cfg.context_len + cfg.horizon)  # (3, L + H)
    series = shape[phase.long()] + torch.tensor([4.0, -2.0], dtype=torch.float64)  # (3, L + H, 2)
    features = torch.randn(3, cfg.context_len + cfg.horizon, n_features, dtype=torch.float64)
    covariates = Covariates(future=features if n_features else None, phase=phase.double())
    forecast = model.predict(series[:, : cfg.context_len], None, covariates)
    torch.testing.assert_close(forecast, series[:, cfg.context_len :])
    every_token = model.forecast_tokens(series[:, : cfg.context_len], None, covariates)
    torch.testing.assert_close(every_token, model.token_targets(series))  # each token's own horizon


def test_the_cycle_reads_its_values_at_each_phase_and_its_gradient_is_the_same_on_every_run():
    """Indexing's gradient accumulated in an order that varied with two threads, so seeded runs differed."""
    torch.manual_seed(0)
    cycle = Cycle(PERIOD, 2)
    with torch.no_grad():
        cycle.values.normal_()
    phase = torch.randint(0, 10_000, (128, 14, 48)).float()  # a training batch's horizon phases
    out = cycle(phase)  # (128, 14, 48, 2)
    torch.testing.assert_close(out[3, 5, 7], cycle.values[int(phase[3, 5, 7]) % PERIOD], rtol=0, atol=0)
    weights = torch.randn(out.shape)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        grads = []
        for _ in range(5):
            cycle.values.grad = None
            (cycle(phase) * weights).sum().backward()
            grads.append(cycle.values.grad.clone())
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(grads[0], grad) for grad in grads[1:])
    counts = torch.bincount(torch.remainder(phase.long(), PERIOD).view(-1), minlength=PERIOD)
    torch.testing.assert_close(grads[0].abs().sum(1) > 0, counts > 0)  # every phase read gets a gradient


def test_the_model_checks_pass_with_a_cycle_and_catch_one_read_past_the_horizon(monkeypatch):
    for model in (cycle_model(), cycle_model(n_features=2, context_len=14)):  # and calendar features, a left pad
        results = {r.name: r for r in check_model(model)}
        assert all(r.passed for r in results.values()), [r.line() for r in results.values() if not r.passed]
    results = {r.name: r for r in check_model(cycle_model())}
    assert all(r.passed for r in results.values()), [r.line() for r in results.values() if not r.passed]
    real = forecaster_module.future_windows

    def next_horizon(future, pad_len, patch_len, horizon):  # token k reads the phases of the horizon after its own
        return real(torch.roll(future, shifts=-horizon, dims=1), pad_len, patch_len, horizon)

    monkeypatch.setattr(forecaster_module, "future_windows", next_horizon)
    results = {r.name: r for r in check_model(cycle_model())}
    assert not results["model/forward"].passed


def test_the_ablation_has_no_transformer_and_refuses_quantiles():
    full, ablation = cycle_model(), cycle_model(transformer=False)
    names = {name.split(".")[0] for name, _ in ablation.named_parameters()}
    assert names == {"cycle", "context_skip"}
    assert sum(p.numel() for p in ablation.parameters()) < sum(p.numel() for p in full.parameters())
    with pytest.raises(ConfigError, match="quantiles needs the Transformer"):
        cfg = tiny_config(transformer=False)
        dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, quantiles=(0.1, 0.9)))
    with pytest.raises(ConfigError, match="nothing to forecast with"):
        tiny_config(transformer=False, context_skip=False)


def test_a_run_with_a_cycle_reads_phases_of_the_real_future_at_predict(tmp_path):
    csv = write_csv(tmp_path / "data.csv", make_frame(n_rows=240))
    # float32: the test scales the context its own way, a float32 digit from predict's, which
    # bfloat16's rounding can turn into 1e-5 of the forecast
    cfg = tiny_config(csv, fallback=False, cycle=PERIOD, precision="float32")
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, calendar=False))
    train(cfg, tmp_path / "run", show_progress=False)
    ckpt = load_predictor(tmp_path / "run" / "model.pt")
    assert ckpt.layout.calendar == () and ckpt.layout.phase == "cycle24_phase"
    assert ckpt.model.cycle.values.abs().sum() > 0  # it learnt a cycle
    data = training_data(cfg)
    np.testing.assert_array_equal(data.inputs.phase[:30].numpy(), np.arange(30) % PERIOD)  # starts at midnight
    forecast = predict_run(tmp_path / "run", csv).frame
    assert list(forecast["date"].dt.hour) == [0, 1, 2, 3]  # 240 rows: the data ends at 23:00
    model = ckpt.model
    window = torch.from_numpy(ckpt.scaler.transform(pd.read_csv(csv)[["a", "b"]].to_numpy()[-16:], 0)).float()
    future = torch.from_numpy(((224 + np.arange(20)) % PERIOD).astype(np.float32))[None]  # (1, L + H)
    expected = ckpt.scaler.inverse(model.predict(window[None], None, Covariates(phase=future))[0].numpy(), 0)
    np.testing.assert_allclose(forecast[["a", "b"]].to_numpy(), expected, rtol=1e-5, atol=1e-5)
