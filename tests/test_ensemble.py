"""model.members: the mean of several Forecasters, each trained on its own loss, read like one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
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


@pytest.mark.parametrize("contexts", [(16, 16), (16, 8)])
def test_a_run_with_members_trains_saves_and_predicts_their_mean(tmp_path, contexts):
    csv = write_csv(tmp_path / "data.csv", make_frame(n_rows=240))
    members = dict(members=2) if contexts[0] == contexts[1] else dict(members=0, member_contexts=contexts)
    train(tiny_config(csv, fallback=False, **members), tmp_path / "run", show_progress=False)
    ckpt = load_predictor(tmp_path / "run" / "model.pt")
    model = ckpt.model
    assert isinstance(model, Ensemble) and [m.cfg.context_len for m in model.members] == list(contexts)
    forecast = predict_run(tmp_path / "run", csv).frame[["a", "b"]].to_numpy()
    values = pd.read_csv(csv)[["a", "b"]].to_numpy()
    window = torch.from_numpy(ckpt.scaler.transform(values[-16:], 0))[None]  # (1, L, C)
    stamps = pd.date_range("2024-01-01", periods=240 + 4, freq="h")[-20:]  # the context and the 4 steps ahead
    calendar = Covariates(None, torch.from_numpy(calendar_features(stamps, "h"))[None])  # (1, L + H, 4)
    each = [  # each member reads its own last steps of the context
        ckpt.scaler.inverse(m.predict(window[:, 16 - c :], None, calendar.from_step(16 - c))[0].numpy(), 0)
        for m, c in zip(model.members, contexts, strict=True)
    ]
    np.testing.assert_allclose(forecast, np.mean(each, axis=0), rtol=1e-4, atol=1e-4)


def mixed(**train) -> Ensemble:
    """Members reading the context's 16 and its last 8 steps (patches of 4), with the phase of a cycle of 4."""
    torch.manual_seed(0)
    cfg = tiny_config(members=0, member_contexts=(16, 8), cycle=4).model
    return build_forecaster(cfg, layout_of(2, n_past=1, n_future=1, cycle=4), **train)


def mixed_inputs(model: Ensemble, batch: int = 3) -> tuple[torch.Tensor, Covariates]:
    cfg = model.cfg
    span = cfg.context_len + cfg.horizon
    x = torch.randn(batch, cfg.context_len, 2)
    phase = (torch.arange(span) % 4).float().expand(batch, -1)  # (B, L + H)
    return x, Covariates(torch.randn(batch, cfg.context_len, 1), torch.randn(batch, span, 1), phase)


def test_members_of_different_contexts_read_the_last_steps_and_average_where_they_reach():
    model = mixed(quantiles=(0.1, 0.9)).eval()
    assert [m.cfg.context_len for m in model.members] == [16, 8] and model.offsets == [0, 8]
    assert model.cfg.member_contexts == (16, 8) and model.n_tokens == 4
    x, covariates = mixed_inputs(model)
    long_point, long_q = model.members[0].outputs_tokens(x, None, covariates)  # (B, 4, H, C)
    short_cov = Covariates(covariates.past[:, 8:], covariates.future[:, 8:], covariates.phase[:, 8:])
    short_point, short_q = model.members[1].outputs_tokens(x[:, 8:], None, short_cov)  # (B, 2, H, C): tokens 2, 3
    point, quantiles = model.outputs_tokens(x, None, covariates)
    torch.testing.assert_close(point[:, :2], long_point[:, :2])  # only the long member reaches tokens 0 and 1
    torch.testing.assert_close(point[:, 2:], (long_point[:, 2:] + short_point) / 2)
    torch.testing.assert_close(quantiles[:, 2:], (long_q[:, 2:] + short_q) / 2)
    torch.testing.assert_close(model.predict(x, None, covariates), point[:, -1])
    window = torch.randn(3, 16 + 4, 2)
    targets = model.token_targets(window)  # (B, 4, H, C)
    _, loss = model(x, None, targets, None, covariates)
    own = model.members[1](x[:, 8:], None, model.members[1].token_targets(window[:, 8:]), None, short_cov)[1]
    expected = (model.members[0](x, None, targets, None, covariates)[1] + own) / 2
    torch.testing.assert_close(loss, expected)


def test_the_leakage_checks_pass_on_members_of_different_contexts_and_catch_misaligned_targets():
    model = mixed()
    results = {r.name: r for r in check_model(model)}
    assert all(r.passed for r in results.values()), [r.line() for r in results.values() if not r.passed]
    assert "each of the 2 members' own" in results["model/targets"].detail
    model.member_targets = lambda targets: [targets, targets[:, :2]]  # the short member given the first tokens'
    assert not {r.name: r for r in check_model(model)}["model/targets"].passed
    model = mixed()
    model.members[1].__class__ = Peeking
    assert not {r.name: r for r in check_model(model)}["model/forward"].passed


def test_member_contexts_resolve_the_context_and_are_checked():
    from tsformer.config import ModelConfig
    from tsformer.errors import ConfigError

    cfg = tiny_config(context_len=0, members=0, member_contexts=(16, 8))
    assert cfg.model.contexts == (16, 8)
    with pytest.raises(ConfigError, match="longest first"):
        ModelConfig(context_len=16, patch_len=4, member_contexts=(8, 16))
    with pytest.raises(ConfigError, match="must be model.context_len"):
        ModelConfig(context_len=32, patch_len=4, member_contexts=(16, 8))
    with pytest.raises(ConfigError, match="2 contexts for model.members=3"):
        ModelConfig(context_len=16, patch_len=4, members=3, member_contexts=(16, 8))
