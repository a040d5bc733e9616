"""tsformer.classical: ETS and Theta (statsmodels) fit to each window's context, as candidates."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from tsformer.candidates import candidate_forecasts, first_observed
from tsformer.classical import classical_forecasts
from tsformer.metrics import forward_fill


def trending_season(n: int, season: int = 12, slope: float = 0.3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 10 + slope * t + 3 * np.sin(2 * np.pi * t / season) + 0.2 * rng.normal(size=n)


def test_ets_and_theta_follow_a_trending_season_where_repeat_last_cannot():
    y = trending_season(96 + 12)
    context, truth = torch.tensor(y[:96]).view(1, 96, 1), y[96:]
    out = candidate_forecasts(context, None, 12, 12, classical=("ets", "theta"))
    errors = {
        name: float(np.abs(out[name][0, :, 0].numpy() - truth).mean()) for name in ("ets", "theta", "repeat_last")
    }
    # ETS finds the trend and the season; Theta extrapolates half the linear trend, so it lags a strong one
    assert errors["ets"] < 0.5 and errors["theta"] < 0.7 * errors["repeat_last"] and errors["repeat_last"] > 3, errors


def test_each_column_is_fit_from_its_first_observed_step_and_short_contexts_repeat_the_last_value():
    y = trending_season(60)
    contexts = torch.tensor(np.stack([y, y], axis=1)[None])  # (1, 60, 2): column 1 observed from step 57 only
    observed = torch.ones_like(contexts, dtype=torch.bool)
    observed[0, :57, 1] = False
    history = forward_fill(contexts, observed)
    out = classical_forecasts(history, first_observed(history, observed), 6, 12, ("ets", "theta"))
    for name in ("ets", "theta"):
        assert out[name].shape == (1, 6, 2) and torch.isfinite(out[name]).all()
        assert torch.equal(out[name][0, :, 1], torch.full((6,), float(y[-1]), dtype=out[name].dtype))
        assert not torch.equal(out[name][0, :, 0], out[name][0, :, 1])


def test_a_short_single_series_trains_with_them_and_every_check_passes(tmp_path):
    from tsformer.api import fit

    months = pd.date_range("2000-01-01", periods=144, freq="MS")
    frame = pd.DataFrame({"month": months.strftime("%Y-%m"), "sales": trending_season(144).round(3)})
    config = {"model.d_model": 8, "model.n_heads": 2, "model.d_ff": 16, "model.n_layers": 1, "train.epochs": 2}
    predictor = fit(frame, horizon=6, config=config)
    assert predictor.config.train.candidates[-2:] == ("ets", "theta")
    assert any(line.startswith("candidates: ETS and Theta (statsmodels") for line in predictor.data.notes)
    windows = predictor.read().split_windows("val").split(predictor.context_len)
    assert {"ets", "theta"} <= set(predictor.forecasters(windows)[0])
    checks = predictor.check()
    assert checks["passed"].all() and "ets" not in checks.loc[checks.name == "forecasters/future", "detail"].item()
    forecast = predictor.predict()
    assert len(forecast) == 6 and forecast["forecaster"].notna().all()


def test_fits_in_worker_processes_give_the_fits_made_here_bit_for_bit(monkeypatch):
    import tsformer.classical as classical

    pools = []

    class Pool(classical.ProcessPoolExecutor):
        def __init__(self, workers, **kwargs):
            pools.append(workers)
            super().__init__(workers, **kwargs)

    monkeypatch.setattr(classical, "ProcessPoolExecutor", Pool)
    rng = np.random.default_rng(1)
    history = torch.tensor(np.stack([trending_season(48, seed=s) for s in range(24)])[:, :, None])  # (24, 48, 1)
    history[:, :, 0] += torch.tensor(rng.normal(size=(24, 1)))
    first = torch.zeros(24, 1, 1, dtype=torch.long)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        here = classical_forecasts(history, first, 6, 12, ("theta",))
        torch.set_num_threads(2)  # 24 fits: two processes of 8 or more each
        forked = classical_forecasts(history, first, 6, 12, ("theta",))
    finally:
        torch.set_num_threads(threads)
    assert pools == [2]  # the serial run made none
    assert here["theta"].shape == (24, 6, 1) and torch.equal(here["theta"], forked["theta"])
    assert not torch.equal(here["theta"][0], here["theta"][1])
