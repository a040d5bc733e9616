"""Never worse than naive on validation: each column keeps the forecaster that did best there."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import TINY_FLAGS
from typer.testing import CliRunner

from tsformer.cli import app
from tsformer.fallback import apply, decide
from tsformer.predictor import load_predictor
from tsformer.runs import evaluate_run, predict_run


def test_each_column_keeps_its_best_forecaster_on_validation():
    truth = torch.zeros(4, 2, 3)  # (N, H, C)
    forecasts = {
        "model": torch.tensor([0.1, 1.0, 0.5]).expand(4, 2, 3),
        "repeat_last": torch.tensor([0.2, 0.3, 0.5]).expand(4, 2, 3),
        "seasonal_naive": torch.tensor([0.3, 0.4, 0.5]).expand(4, 2, 3),
    }
    decision = decide(forecasts, truth, None, ("a", "b", "c"))
    assert decision.choice == (("model", "repeat_last", "model"),)  # one series; a tie keeps the model
    assert decision.val_error["model"][0] == pytest.approx((0.01, 1.0, 0.25))
    assert decision.lines()[1].startswith("b: model 1 vs repeat-last 0.09 on validation: using repeat-last (rule best")
    assert decide(forecasts, truth, None, ("a", "b", "c"), enabled=False).choice == (("model",) * 3,)
    combined = apply(decision.weights, forecasts)
    assert combined[0, 0].tolist() == pytest.approx([0.1, 0.3, 0.5])


def test_unobserved_validation_cells_do_not_count():
    truth = torch.tensor([[[0.0], [100.0]]])  # (1, 2, 1): the second cell is unobserved
    observed = torch.tensor([[[True], [False]]])
    forecasts = {"model": torch.zeros(1, 2, 1), "repeat_last": torch.full((1, 2, 1), 100.0)}
    forecasts["seasonal_naive"] = forecasts["repeat_last"]
    assert decide(forecasts, truth, observed, ("y",)).choice == (("model",),)


def test_each_series_keeps_its_best_forecaster_and_one_without_validation_keeps_the_model():
    truth = torch.zeros(4, 2, 1)  # (N, H, C): windows of series 0, 0, 1, 1; series 2 has none
    forecasts = {
        "model": torch.tensor([0.1, 0.1, 2.0, 2.0]).view(4, 1, 1).expand(4, 2, 1),
        "repeat_last": torch.tensor([1.0, 1.0, 0.5, 0.5]).view(4, 1, 1).expand(4, 2, 1),
        "seasonal_naive": torch.ones(4, 2, 1),
    }
    ids = np.array([0, 0, 1, 1])
    decision = decide(forecasts, truth, None, ("y",), ids=ids, n_ids=3)
    assert decision.choice == (("model",), ("repeat_last",), ("model",))
    assert np.isnan(decision.val_error["model"][2, 0])
    assert "chosen per series: the model in 2, repeat-last in 1 of 3 series" in decision.lines()[0]
    shipped = apply(decision.weights, forecasts, ids)
    assert shipped[:, 0, 0].tolist() == pytest.approx([0.1, 0.1, 0.5, 0.5])


def _train(tmp_path, values: np.ndarray, *extra: str):
    csv = tmp_path / "series.csv"
    dates = pd.date_range("2024-01-01", periods=len(values), freq="h").strftime("%Y-%m-%d %H:%M:%S")
    pd.DataFrame({"date": dates, "y": values}).to_csv(csv, index=False)
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", str(csv), "--out", str(run), "--quiet", *TINY_FLAGS, *extra])
    assert result.exit_code == 0, result.output
    return csv, run, result.stdout


def test_a_random_walk_falls_back_to_repeat_last_everywhere_it_is_used(tmp_path):
    walk = np.cumsum(np.random.default_rng(0).normal(size=600)) + 100
    csv, run, output = _train(tmp_path, walk)
    assert load_predictor(run / "model.pt").fallback.choice == (("repeat_last",),)
    assert "on validation: using repeat-last" in output.strip().splitlines()[-1]
    forecast = predict_run(run, csv).frame["y"].to_numpy()
    np.testing.assert_allclose(forecast, walk[-1], rtol=1e-5)  # the last value, repeated, in the CSV's units
    report = evaluate_run(run, write=False)
    assert report.scores["model"]["mean"] == report.scores["repeat_last"]["mean"]


def test_a_seasonal_series_with_a_trend_keeps_the_model(tmp_path):
    t = np.arange(600)
    series = 0.05 * t + 3 * np.sin(2 * np.pi * t / 24) + np.random.default_rng(0).normal(0, 0.1, len(t))
    _, run, output = _train(tmp_path, series, "--epochs", "6")
    fallback = load_predictor(run / "model.pt").fallback
    weights = dict(zip(fallback.names, fallback.values[0, 0], strict=True))
    assert weights["model"] > 0.5 and max(weights.values()) == weights["model"], output  # the model leads
    # the tiny context (16 steps) does not reach the season (24): seasonal naive is repeat-last, weighed once
    assert "seasonal_naive" not in weights and weights["repeat_last"] >= weights["drift"], output


def test_no_fallback_always_uses_the_model(tmp_path):
    walk = np.cumsum(np.random.default_rng(0).normal(size=600)) + 100
    _, run, output = _train(tmp_path, walk, "--no-fallback")
    assert load_predictor(run / "model.pt").fallback.choice == (("model",),)
    assert output.strip().splitlines()[-1].endswith("using the model")  # no rule to choose


def test_every_forecast_row_names_its_forecaster_and_predict_says_when_it_is_not_the_model(tmp_path):
    walk = np.cumsum(np.random.default_rng(0).normal(size=600)) + 100  # repeat-last beats the model
    csv, run, _ = _train(tmp_path, walk)
    result = CliRunner().invoke(app, ["predict", str(run), str(csv)])
    assert result.exit_code == 0, result.output
    forecast = pd.read_csv(io.StringIO(result.stdout))
    assert list(forecast.columns)[-1] == "forecaster" and (forecast["forecaster"] == "repeat_last").all()
    assert (
        "forecast by a classical candidate, a blend, or a weighted mean of the model and the candidates, which beat "
        "the model alone on validation: y by repeat-last (the forecaster "
        "column names each row's; a run trained with --no-fallback ships the model everywhere)"
    ) in result.stderr
    report = evaluate_run(run, write=False)  # the model's own row beside the shipped one
    assert list(report.scores) == ["model", "model_alone", "repeat_last", "seasonal_naive", "drift", "seasonal_drift"]
    assert report.scores["model_alone"]["mean"]["mse"] > report.scores["model"]["mean"]["mse"]
    (tmp_path / "plain").mkdir()
    plain = _train(tmp_path / "plain", walk, "--no-fallback")[1]
    quiet = CliRunner().invoke(app, ["predict", str(plain), str(csv)])
    assert "naive forecaster" not in quiet.stderr
    assert set(pd.read_csv(io.StringIO(quiet.stdout))["forecaster"]) == {"model"}
    assert "model_alone" not in evaluate_run(plain, write=False).scores  # nothing to show beside the model


def test_several_targets_and_series_name_their_forecaster_per_column():
    from tsformer.fallback import Weights, chosen, not_the_model

    choice = (("model", "repeat_last"), ("seasonal_naive", "model"))  # two series, two columns
    weights = Weights.of_names(choice, ("model", "repeat_last", "seasonal_naive"))
    names = chosen(weights, np.array([0, 1, -1]), 2)  # -1: a series not trained on, which the model forecasts
    assert names.tolist() == [["model", "repeat_last"], ["seasonal_naive", "model"], ["model", "model"]]
    line = not_the_model(names, ("a", "b"), per_series=True)
    assert "a in 1 of 3 series (seasonal naive in 1); b in 1 of 3 series (repeat-last in 1)" in line
    assert not_the_model(chosen(None, np.array([0]), 2), ("a", "b"), per_series=False) == ""


def test_a_blend_wins_where_the_model_and_a_candidate_err_on_opposite_sides():
    truth = torch.zeros(6, 4, 1)
    forecasts = {"model": truth + 1.0, "repeat_last": truth + 3.0, "seasonal_naive": truth - 1.2}
    decision = decide(forecasts, truth, None, ("y",), ids=np.repeat([0, 1], 3), n_ids=2, rule="best")
    assert decision.choice == (("blend_seasonal_naive",), ("blend_seasonal_naive",))
    assert decision.val_error["blend_seasonal_naive"][0, 0] == pytest.approx(0.01)  # (1 - 1.2) / 2, squared
    shipped = apply(decision.weights, forecasts, np.repeat([0, 1], 3))
    assert torch.allclose(shipped, torch.full((6, 4, 1), -0.1))
    assert "the model blended with seasonal naive in 2 of 2 series" in decision.lines()[0]


def test_the_selection_metric_mae_weighs_one_large_miss_less_than_mse():
    truth = torch.zeros(2, 4, 1)
    forecasts = {"model": truth + torch.tensor([0.0, 0.0, 0.0, 3.0]).view(1, 4, 1), "repeat_last": truth + 1.0}
    assert decide(forecasts, truth, None, ("y",), rule="best").choice == (("repeat_last",),)  # MSE: 9/4 against 1
    by_mae = decide(forecasts, truth, None, ("y",), metric="mae")
    assert by_mae.choice == (("model",),) and by_mae.val_error["model"][0, 0] == pytest.approx(0.75)
    assert by_mae.lines()[0].startswith("y: model 0.75 vs repeat-last 1 on validation MAE: using the model")


def test_the_weighted_rule_weighs_each_library_forecaster_by_its_error_to_the_power_minus_four():
    truth = torch.zeros(3, 2, 1)
    forecasts = {"model": truth + 1.0, "repeat_last": truth + 2.0, "seasonal_naive": truth - 3.0}
    decision = decide(forecasts, truth, None, ("y",), rule="weighted")
    errors = {"model": 1.0, "repeat_last": 4.0, "seasonal_naive": 9.0}
    errors |= {"blend_repeat_last": 2.25, "blend_seasonal_naive": 1.0}
    assert {name: decision.val_error[name][0, 0] for name in errors} == pytest.approx(errors)
    share = {name: error**-4 for name, error in errors.items()}
    total = sum(share.values())
    model = (share["model"] + 0.5 * share["blend_repeat_last"] + 0.5 * share["blend_seasonal_naive"]) / total
    seasonal = (share["seasonal_naive"] + 0.5 * share["blend_seasonal_naive"]) / total
    weights = dict(zip(decision.weights.names, decision.weights.values[0, 0], strict=True))
    assert weights["model"] == pytest.approx(model) and weights["seasonal_naive"] == pytest.approx(seasonal)
    assert sum(weights.values()) == pytest.approx(1.0)
    shipped = apply(decision.weights, forecasts)  # the weighted mean, every step
    expected = sum(weights[name] * forecasts[name] for name in weights)
    assert torch.allclose(shipped, expected)
    assert "weighted by its validation MSE to the power -4" in decision.lines()[0]


def test_the_rule_is_chosen_on_the_last_third_of_each_series_origins():
    # two forecasters erring on opposite sides by turns: whichever led on the first origins, their mean wins later
    flips = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0]).view(6, 1, 1).expand(6, 3, 1)
    truth = torch.zeros(6, 3, 1)
    forecasts = {"model": truth + 0.9 * flips + 0.2, "repeat_last": truth - flips, "seasonal_naive": truth + 5.0}
    mixed = decide(forecasts, truth, None, ("y",))
    assert mixed.rule == "weighted" and mixed.nested["weighted"] < mixed.nested["best"]
    # one forecaster best on every origin, the others wrong in the same direction: any mix is worse
    steady = {"model": truth + 0.1, "repeat_last": truth + 1.0, "seasonal_naive": truth + 2.0}
    best = decide(steady, truth, None, ("y",))
    assert best.rule == "best" and best.choice == (("model",),)
    assert decide(steady, truth, None, ("y",), metric="mae").rule == "best"  # MAE: no combination is scored
    # repeat-last exact on the first origins, far off on the last: choosing on the first ships what loses
    late = torch.tensor([0.0, 0.0, 0.0, 0.0, 4.0, 4.0]).view(6, 1, 1).expand(6, 3, 1)
    shifted = {"model": truth + 0.5, "repeat_last": truth + late, "seasonal_naive": truth + 3.0}
    alone = decide(shifted, truth, None, ("y",))
    assert alone.rule == "model" and alone.choice == (("model",),)
    assert "using the model alone everywhere (rule model" in alone.lines()[0]


def test_the_rule_weighs_every_series_alike_not_by_the_size_of_its_errors():
    # two series where repeat-last beats the model on every origin, and one whose values left their training range:
    # errors a hundred times larger, with repeat-last exact on its first origins and 40 off on its last two
    truth = torch.zeros(18, 3, 1)
    ids = np.repeat([0, 1, 2], 6)
    late = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 1.0]).view(6, 1, 1).expand(6, 3, 1)
    off = {
        "model": torch.cat([truth[:12] + 1.0, truth[12:] + 5.0]),
        "repeat_last": torch.cat([truth[:12] + 0.1, truth[12:] + 40 * late]),
        "seasonal_naive": torch.cat([truth[:12] + 3.0, truth[12:] + 30.0]),
    }
    decision = decide(off, truth, None, ("y",), ids=ids, n_ids=3)
    # on the last third the mean MSE would keep the model ((1 + 1 + 25) / 3 against (0.01 + 0.01 + 1600) / 3 for
    # best); relative to the model, best's geometric mean is (0.01 * 0.01 * 64) ** (1 / 3)
    assert decision.rule == "best" and decision.nested["model"] == 1.0
    assert decision.nested["best"] == pytest.approx((0.01 * 0.01 * 64) ** (1 / 3))
    assert decision.choice == (("repeat_last",), ("repeat_last",), ("model",))  # over all six origins: 533 against 25
    assert "of the model alone's on the last third of validation origins" in decision.lines()[0]


def test_a_series_a_candidate_forecasts_exactly_does_not_decide_the_rule():
    # the previous test's panel plus a constant series, which repeat-last forecasts exactly and the model nearly:
    # solved there (within the panel score's floor), it is left out of the rule's choice, so the rule and its scores
    # stay the previous test's; an unfloored ratio of 0 would send best's and weighted's geometric means to 0
    truth = torch.zeros(24, 3, 1)
    ids = np.repeat([0, 1, 2, 3], 6)
    late = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 1.0]).view(6, 1, 1).expand(6, 3, 1)
    off = {
        "model": torch.cat([truth[:12] + 1.0, truth[12:18] + 5.0, truth[18:] + 1e-3]),
        "repeat_last": torch.cat([truth[:12] + 0.1, truth[12:18] + 40 * late, truth[18:]]),
        "seasonal_naive": torch.cat([truth[:12] + 3.0, truth[12:18] + 30.0, truth[18:] + 2.0]),
    }
    decision = decide(off, truth, None, ("y",), ids=ids, n_ids=4)
    assert decision.nested["model"] == 1.0
    assert decision.nested["best"] == pytest.approx((0.01 * 0.01 * 64) ** (1 / 3))
    assert decision.rule == "best" and decision.choice[3] == ("repeat_last",)


def test_many_solved_series_leave_the_rule_to_the_others_and_ship_what_solved_them():
    # three series where the model beats repeat-last on the last origins (the rule: model), and five all-zero
    # stretches repeat-last gets exactly while the model is 0.03 off: floored at 1e-4 against 9e-4, their ratios
    # (1/9 each) outvoted the three and chose "best" for every series
    truth = torch.zeros(48, 3, 1)
    ids = np.repeat(np.arange(8), 6)
    late = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 1.0]).view(6, 1, 1).expand(6, 3, 1)
    late = late.repeat(3, 1, 1)  # (18, 3, 1): each busy series' six origins
    busy = {"model": truth[:18] + 0.5, "repeat_last": truth[:18] + 4 * late, "seasonal_naive": truth[:18] + 3.0}
    quiet = {"model": truth[18:] + 0.03, "repeat_last": truth[18:], "seasonal_naive": truth[18:] + 1.0}
    forecasts = {name: torch.cat([busy[name], quiet[name]]) for name in busy}
    decision = decide(forecasts, truth, None, ("y",), ids=ids, n_ids=8)
    assert decision.rule == "model" and decision.nested["best"] > 1.0  # on the three busy series alone
    assert decision.choice == (("model",),) * 3 + (("repeat_last",),) * 5
    assert "chosen per series: the model in 3, repeat-last in 5 of 8 series (rule model" in decision.lines()[0]
    assert decide(forecasts, truth, None, ("y",), enabled=False, ids=ids, n_ids=8).choice == (("model",),) * 8


def test_the_gram_matrix_gives_each_blend_its_own_squared_error():
    from tsformer.fallback import WindowErrors

    generator = torch.Generator().manual_seed(0)
    truth = torch.randn(5, 4, 2, generator=generator)
    forecasts = {name: torch.randn(5, 4, 2, generator=generator) for name in ("model", "repeat_last", "drift")}
    observed = torch.rand(5, 4, 2, generator=generator) > 0.3
    errors = WindowErrors.of(forecasts, truth, observed)
    direct = ((0.5 * (forecasts["model"] + forecasts["drift"]) - truth) ** 2 * observed).sum(1).double()
    assert torch.allclose(errors.sums["blend_drift"], direct, atol=1e-5)
    assert errors.steps.tolist() == observed.sum(1).double().tolist()


def test_each_series_late_gram_matrix_sums_its_last_third_of_origins_a_few_windows_at_a_time(monkeypatch):
    import tsformer.fallback as fallback

    generator = torch.Generator().manual_seed(1)
    truth = torch.randn(7, 6, 2, generator=generator)
    names = ("model", "repeat_last", "drift")
    forecasts = {name: torch.randn(7, 6, 2, generator=generator) for name in names}
    observed = torch.rand(7, 6, 2, generator=generator) > 0.3
    ids = np.array([0, 0, 0, 1, 1, 1, 1])  # late origins: series 0's third window, series 1's last
    assert fallback.late_origins(ids, 2).tolist() == [False, False, True, False, False, False, True]
    whole = fallback.WindowErrors.of(forecasts, truth, observed, ids=ids, n_ids=2)
    monkeypatch.setattr(fallback, "GRAM_ELEMENTS", 2 * 6 * 2 * 3)  # two windows a block: blocks of 2, 2, 2 and 1
    blocked = fallback.WindowErrors.of(forecasts, truth, observed, ids=ids, n_ids=2)
    errors = torch.stack([forecasts[name] - truth for name in names], -1).double() * observed.unsqueeze(-1)
    assert blocked.late_gram.shape == (2, 2, 3, 3)
    assert torch.allclose(blocked.late_gram, whole.late_gram, rtol=0, atol=1e-12)
    by_hand = (errors[6, :, 1, 0] * errors[6, :, 1, 2]).sum()  # series 1, column 1, model against drift
    assert blocked.late_gram[1, 1, 0, 2].item() == pytest.approx(by_hand.item(), abs=1e-12)
    for name in blocked.sums:
        assert torch.allclose(blocked.sums[name], whole.sums[name], rtol=0, atol=1e-12)


def test_no_validation_window_keeps_the_model():
    from tsformer.fallback import WindowErrors

    empty = {"model": torch.zeros(0, 3, 2), "repeat_last": torch.zeros(0, 3, 2)}
    errors = WindowErrors.of(empty, torch.zeros(0, 3, 2), None)
    assert errors.sums["blend_repeat_last"].shape == (0, 2) and errors.late_gram.abs().sum() == 0
    decision = decide(empty, torch.zeros(0, 3, 2), None, ("a", "b"))
    assert decision.choice == (("model", "model"),)
