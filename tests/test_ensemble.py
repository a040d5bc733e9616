"""model.members: the mean of several Forecasters, each trained on its own loss, read like one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from helpers import layout_of, make_frame, tiny_config, write_csv

from tsformer.data.calendar import calendar_features
from tsformer.leakage import check_model
from tsformer.model import Covariates, Ensemble, Forecaster, build_forecaster
from tsformer.predictor import load_predictor
from tsformer.runs import predict_run
from tsformer.train import train


def ensemble(members: int = 3, **train) -> Ensemble:
    torch.manual_seed(0)
    return build_forecaster(tiny_config(members=members).model, layout_of(2), **train)


def test_one_member_is_a_plain_forecaster_and_members_start_apart():
    assert type(build_forecaster(tiny_config().model, layout_of(2))) is Forecaster
    model = ensemble()
    assert isinstance(model, Ensemble) and len(model.members) == 3
    first, second = (dict(m.named_parameters())["projection.linear.weight"] for m in model.members[:2])
    assert not torch.equal(first, second)


def test_outputs_and_loss_are_the_means_of_the_members():
    model = ensemble(quantiles=(0.1, 0.5, 0.9)).eval()
    cfg = model.cfg
    x = torch.randn(4, cfg.context_len, 2)
    point, quantiles = model.outputs_tokens(x)
    parts = [m.outputs_tokens(x) for m in model.members]
    torch.testing.assert_close(point, sum(p for p, _ in parts) / 3)
    torch.testing.assert_close(quantiles, sum(q for _, q in parts) / 3)
    assert (quantiles.diff(dim=-1) >= 0).all()  # a mean of sorted quantiles never crosses
    torch.testing.assert_close(model.predict(x), point[:, -1])
    target = torch.randn(4, cfg.horizon, 2)
    _, loss = model(x, target=target)
    torch.testing.assert_close(loss, sum(m(x, target=target)[1] for m in model.members) / 3)


class Peeking(Forecaster):
    """A member that reads one patch ahead of each token."""

    def outputs_tokens(self, x, observed=None, covariates=None):
        return super().outputs_tokens(torch.roll(x, shifts=-self.cfg.patch_len, dims=1), observed, covariates)


def test_the_leakage_checks_pass_on_an_ensemble_and_catch_one_leaking_member():
    assert all(r.passed for r in check_model(ensemble()))
    model = ensemble()
    model.members[1].__class__ = Peeking
    results = {r.name: r for r in check_model(model)}
    assert not results["model/forward"].passed


def test_a_run_with_members_trains_saves_and_predicts_their_mean(tmp_path):
    csv = write_csv(tmp_path / "data.csv", make_frame(n_rows=240))
    train(tiny_config(csv, fallback=False, members=2), tmp_path / "run", show_progress=False)
    ckpt = load_predictor(tmp_path / "run" / "model.pt")
    model = ckpt.model
    assert isinstance(model, Ensemble) and len(model.members) == 2
    forecast = predict_run(tmp_path / "run", csv).frame[["a", "b"]].to_numpy()
    values = pd.read_csv(csv)[["a", "b"]].to_numpy()
    window = torch.from_numpy(ckpt.scaler.transform(values[-16:], 0))[None]  # (1, L, C)
    stamps = pd.date_range("2024-01-01", periods=240 + 4, freq="h")[-20:]  # the context and the 4 steps ahead
    calendar = Covariates(None, torch.from_numpy(calendar_features(stamps, "h"))[None])  # (1, L + H, 4)
    each = [ckpt.scaler.inverse(m.predict(window, None, calendar)[0].numpy(), 0) for m in model.members]
    np.testing.assert_allclose(forecast, np.mean(each, axis=0), rtol=1e-4, atol=1e-4)
