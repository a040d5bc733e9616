import dataclasses
import math

import pytest
import torch
from helpers import layout_of

from tsformer.config import ModelConfig, config_from_dict
from tsformer.data import split_window
from tsformer.errors import ConfigError
from tsformer.model import (
    Block,
    Forecaster,
    MultiHeadAttention,
    attention,
    attention_mask,
    causal_mask,
    instance_stats,
    scaled_dot_product,
    sinusoidal_encoding,
)
from tsformer.model.attention import CPU_FORMULA_MAX_TOKENS, fused_is_faster
from tsformer.model.forecaster import NAIVE_SCALE_FLOOR
from tsformer.model.inference import PREDICT_SEQUENCES


def test_positional_encoding_matches_the_formula():
    d = 6
    pe = sinusoidal_encoding(10, d)
    for pos in range(10):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    assert sinusoidal_encoding(4, 5).shape == (4, 5)  # odd widths work too


def test_attention_is_softmax_of_scaled_scores_times_v():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 2)
    out = scaled_dot_product(q, k, v)
    for i in range(3):
        scores = [sum(q[i, c] * k[j, c] for c in range(4)) / math.sqrt(4) for j in range(3)]
        weights = [math.exp(s) / sum(math.exp(t) for t in scores) for s in scores]
        expected = sum(weights[j] * v[j] for j in range(3))
        torch.testing.assert_close(out[i], expected)


def test_attention_weights_stay_finite_for_large_scores_and_match_torch_softmax():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 6, 4) * 300, torch.randn(2, 6, 4), torch.eye(6).expand(2, 6, 6)  # exp(score) overflows
    weights = scaled_dot_product(q, k, v, causal_mask(6))  # v = I: the output rows are the weight rows
    scores = (q @ k.transpose(-2, -1) / 2).masked_fill(~causal_mask(6), float("-inf"))
    assert torch.isfinite(weights).all()
    torch.testing.assert_close(weights, torch.softmax(scores, dim=-1))


def test_causal_mask_gives_zero_weight_to_the_future():
    torch.manual_seed(0)
    q, k = torch.randn(5, 4), torch.randn(5, 4)
    v = torch.eye(5)  # the output row i is then the weight row i
    weights = scaled_dot_product(q, k, v, causal_mask(5))
    assert torch.all(weights.triu(1) == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(5))
    assert weights[0, 0] == 1.0


def test_padding_mask_hides_pad_keys_but_keeps_each_query_finite():
    token_real = torch.tensor([[False, False, True, True]])
    mask = attention_mask(token_real)[0, 0]
    assert mask.tolist() == [
        [True, False, False, False],
        [False, True, False, False],
        [False, False, True, False],
        [False, False, True, True],
    ]


def test_heads_split_d_model_and_output_shape_equals_input():
    attn = MultiHeadAttention(d_model=12, n_heads=3)
    assert attn.d_head == 4
    x = torch.randn(2, 7, 12)
    assert attn.split_heads(x).shape == (2, 3, 7, 4)
    mask = attention_mask(torch.ones(2, 7, dtype=torch.bool))
    assert attn(x, mask).shape == x.shape
    block = Block(ModelConfig(d_model=12, n_heads=3, d_ff=8, context_len=16, patch_len=4))
    assert block(block(x, mask), mask).shape == x.shape  # blocks stack


def test_explicit_and_fused_attention_agree():
    torch.manual_seed(0)
    fused = MultiHeadAttention(16, 4, kernel="fused").eval()
    explicit = MultiHeadAttention(16, 4, kernel="explicit").eval()
    explicit.load_state_dict(fused.state_dict())
    x = torch.randn(3, 9, 16)
    real = torch.ones(3, 9, dtype=torch.bool)
    real[1, :4] = False  # padding too
    mask = attention_mask(real)
    torch.testing.assert_close(fused(x, mask), explicit(x, mask), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("n_tokens, fused", [(CPU_FORMULA_MAX_TOKENS, False), (CPU_FORMULA_MAX_TOKENS + 1, True)])
def test_auto_attention_takes_the_formula_on_short_rows_on_cpu(monkeypatch, n_tokens, fused):
    calls = []
    kernel = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or kernel(*a, **k))
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4, kernel="auto").eval()
    reference = MultiHeadAttention(16, 4, kernel="explicit").eval()
    reference.load_state_dict(attn.state_dict())
    x = torch.randn(2, n_tokens, 16)
    torch.testing.assert_close(attn(x), reference(x), atol=1e-6, rtol=1e-5)
    assert bool(calls) == fused
    assert fused_is_faster(n_tokens, torch.device("cuda"))  # the fused kernel everywhere off the CPU


def test_whole_models_agree_between_attention_paths():
    cfg = ModelConfig(
        context_len=32, horizon=8, patch_len=4, d_model=16, n_heads=4, d_ff=32, n_layers=2, attention="fused"
    )
    torch.manual_seed(0)
    fused = Forecaster(cfg, layout_of(3)).eval()
    explicit = Forecaster(dataclasses.replace(cfg, attention="explicit"), layout_of(3)).eval()
    explicit.load_state_dict(fused.state_dict())
    x = torch.randn(2, 32, 3)
    torch.testing.assert_close(fused.predict(x), explicit.predict(x), atol=1e-5, rtol=1e-5)


def test_prefix_stats_use_only_steps_up_to_each_token():
    values = torch.tensor([1.0, 3.0, 5.0, 7.0, 100.0, 200.0]).view(1, 6, 1)
    mask = torch.ones(1, 6, dtype=torch.bool)
    mean, std = instance_stats(values, mask, patch_len=2)
    assert mean[0, :, 0].tolist() == pytest.approx([2.0, 4.0, (1 + 3 + 5 + 7 + 100 + 200) / 6])
    assert std[0, 0, 0].item() == pytest.approx(math.sqrt(1.0 + 1e-5))
    assert std[0, 1, 0].item() == pytest.approx(math.sqrt(5.0 + 1e-5))  # population variance of 1, 3, 5, 7


def test_pad_steps_are_excluded_from_stats():
    values = torch.tensor([999.0, 1.0, 3.0, 5.0]).view(1, 4, 1)
    mask = torch.tensor([[False, True, True, True]])
    mean, _ = instance_stats(values, mask, patch_len=2)
    assert mean[0, :, 0].tolist() == pytest.approx([1.0, 3.0])


@pytest.mark.parametrize("channel_independent", [True, False])
@pytest.mark.parametrize("attention", ["fused", "explicit"])
def test_values_in_pad_positions_do_not_change_the_forecast(channel_independent, attention):
    cfg = ModelConfig(
        context_len=30,
        horizon=5,
        patch_len=4,
        d_model=16,
        n_heads=2,
        d_ff=16,
        n_layers=2,
        channel_independent=channel_independent,
        attention=attention,
    )
    torch.manual_seed(0)
    model = Forecaster(cfg, layout_of(2)).eval()
    x = torch.randn(1, 30, 2)
    observed = torch.zeros(1, 30, dtype=torch.bool)
    observed[:, -11:] = True  # 11 real steps: a partly padded token, and fully padded ones
    other = x.clone()
    other[:, :-11] = torch.tensor(float("nan"))
    garbage = x.clone()
    garbage[:, :-11] = 1e6
    reference = model.predict(x, observed)
    assert torch.equal(reference, model.predict(other, observed))
    assert torch.equal(reference, model.predict(garbage, observed))
    assert torch.isfinite(reference).all()
    assert not torch.equal(reference, model.predict(x))  # the mask is not ignored


def test_token_targets_follow_each_token_and_the_last_is_the_window_target():
    cfg = ModelConfig(context_len=10, horizon=3, patch_len=4, d_model=8, n_heads=2, d_ff=8, n_layers=1)
    model = Forecaster(cfg, layout_of(1))
    assert model.pad_len == 2 and model.token_ends() == [2, 6, 10]
    window = torch.arange(13, dtype=torch.float32).view(1, 13, 1)
    context, target = split_window(window, cfg.context_len)
    assert context[0, :, 0].tolist() == list(range(10))
    assert target[0, :, 0].tolist() == [10, 11, 12]
    targets = model.token_targets(window)
    assert targets[0, :, :, 0].tolist() == [[2, 3, 4], [6, 7, 8], [10, 11, 12]]
    assert torch.equal(targets[:, -1], target)


def test_forward_returns_forecast_and_loss():
    cfg = ModelConfig(context_len=16, horizon=4, patch_len=4, d_model=8, n_heads=2, d_ff=8, n_layers=1)
    model = Forecaster(cfg, layout_of(3))
    x, target = torch.randn(5, 16, 3), torch.randn(5, 4, 3)
    forecast, loss = model(x, target=target)
    assert forecast.shape == (5, 4, 3)
    torch.testing.assert_close(loss, ((forecast - target) ** 2).mean())
    assert model(x)[1] is None


INFERENCE_CONFIGS = [
    dict(context_len=336, patch_len=24),  # the ETTh1 default (chosen from its length): channel-independent
    dict(context_len=30, horizon=5, patch_len=4),  # a left-padded first token
    dict(context_len=30, horizon=5, patch_len=4, channel_independent=False, attention="explicit"),
    dict(context_len=30, horizon=5, patch_len=4, context_skip=False, stats_features=False),
    dict(context_len=12, horizon=5, patch_len=1),
]


def trained_looking(cfg: ModelConfig, n_series: int) -> Forecaster:
    """A model in eval mode whose context skip is not zero (it starts at zero)."""
    torch.manual_seed(0)
    model = Forecaster(cfg, layout_of(n_series)).eval()
    if model.context_skip is not None:
        with torch.no_grad():
            model.context_skip.linear.weight.normal_(0.0, 0.05)
    return model


@pytest.mark.parametrize("overrides", INFERENCE_CONFIGS)
def test_last_token_inference_equals_the_last_token_of_every_token_forward(overrides):
    model = trained_looking(ModelConfig(**overrides), n_series=3)
    cfg = model.cfg
    x = torch.randn(6, cfg.context_len, 3)
    observed = torch.ones(6, cfg.context_len, dtype=torch.bool)
    observed[:3, : cfg.context_len // 2] = False  # half the batch with a short history
    for mask in (None, observed):
        with torch.no_grad():
            every = model.forecast_tokens(x, mask)  # (B, T, H, C)
        last = model.predict(x, mask)
        assert every.shape == (6, cfg.n_tokens, cfg.horizon, 3) and last.shape == (6, cfg.horizon, 3)
        torch.testing.assert_close(last, every[:, -1], atol=1e-6, rtol=1e-6)
        assert every[:, -1].abs().max() > 0.1  # not trivially zero


@pytest.mark.parametrize("horizon", [5, 40])  # shorter than the context's 32 padded steps, and longer
def test_parts_of_the_last_token_path_equal_the_every_token_parts(horizon):
    model = trained_looking(ModelConfig(context_len=30, horizon=horizon, patch_len=4, d_model=16, n_heads=2), 2)
    n, t, k = 4, model.n_tokens, model.token_channels
    hidden, token_real = torch.randn(n, t, 16), torch.rand(n, t) > 0.3
    torch.testing.assert_close(model.head.last(hidden, token_real), model.head(hidden, token_real)[:, -1])
    series, mask = torch.randn(n, t * 4, k), torch.rand(n, t * 4) > 0.3
    mask[:2] = True  # two fully observed sequences
    series = series * mask.unsqueeze(-1)  # pads are zero, as `_sequences` leaves them
    mean, std = torch.randn(n, t, k), torch.rand(n, t, k) + 0.5
    every = model.context_skip(series, mask, mean, std)  # (N, T, H, k)
    torch.testing.assert_close(model.context_skip.last(series, mask, mean[:, -1], std[:, -1]), every[:, -1])
    linear, steps = model.context_skip.linear, t * 4
    for token in (0, 3, t - 1):  # the formula, by hand: the standardised window ending at the token's end
        end = (token + 1) * 4
        window, real = series[:, max(0, end - steps) : end], mask[:, max(0, end - steps) : end].unsqueeze(-1)
        scaled = (window - mean[:, token : token + 1]) / std[:, token : token + 1] * real  # (N, <= T*P, k)
        scaled = torch.cat([scaled.new_zeros(n, steps - scaled.shape[1], k), scaled], dim=1)  # (N, T*P, k)
        expected = linear(scaled.transpose(1, 2)).transpose(1, 2)  # (N, H, k)
        torch.testing.assert_close(every[:, token], expected)


def test_forward_trains_every_token_but_infers_from_the_last_only(monkeypatch):
    cfg = ModelConfig(context_len=16, horizon=4, patch_len=4, d_model=8, n_heads=2, d_ff=8, n_layers=1, dropout=0.0)
    model = trained_looking(cfg, 2)
    window = torch.randn(5, 20, 2)
    context, target = split_window(window, 16)
    tokens = model.forecast_tokens(context)
    _, loss = model(context, target=model.token_targets(window))
    torch.testing.assert_close(loss, ((tokens - model.token_targets(window)) ** 2).mean())
    calls = []
    monkeypatch.setattr(Forecaster, "outputs_tokens", lambda *a: calls.append(a) or (tokens, None))
    forecast, no_loss = model(context)
    assert no_loss is None and calls == []  # no every-token forward for a plain forecast
    torch.testing.assert_close(forecast, tokens[:, -1])


def test_mae_loss():
    cfg = ModelConfig(context_len=16, horizon=4, patch_len=4, d_model=8, n_heads=2, d_ff=8, n_layers=1)
    model = Forecaster(cfg, layout_of(3), loss="mae")
    x, target = torch.randn(5, 16, 3), torch.randn(5, 4, 3)
    forecast, loss = model(x, target=target)
    torch.testing.assert_close(loss, (forecast - target).abs().mean())


def test_the_scale_free_loss_divides_each_windows_errors_by_its_naive_mae():
    cfg = ModelConfig(context_len=16, horizon=4, patch_len=4, d_model=8, n_heads=2, d_ff=8, n_layers=1)
    model = Forecaster(cfg, layout_of(2), loss="mase").eval()
    torch.manual_seed(0)
    x, target = torch.randn(3, 16, 2), torch.randn(3, 4, 2)
    x[1, :, 1] *= 100  # a window 100 times larger weighs as much as the others
    x[2, :, 0] = 5.0  # a flat context: its scale is the floor, not zero
    observed = torch.ones(3, 16, dtype=torch.bool)
    observed[0, :3] = False  # left padding: pairs with a padded step are not counted
    forecast, loss = model(x, observed, target=target)
    scale = torch.empty(3, 2)
    for b in range(3):
        for c in range(2):
            pairs = [abs(float(x[b, t, c] - x[b, t - 4, c])) for t in range(4, 16) if observed[b, t - 4]]
            scale[b, c] = max(sum(pairs) / len(pairs), NAIVE_SCALE_FLOOR)
    assert scale[2, 0] == NAIVE_SCALE_FLOOR
    by_hand = ((forecast - target).abs() / scale[:, None, :]).mean()
    torch.testing.assert_close(loss, by_hand)
    tokens = model.token_targets(torch.randn(3, 20, 2))  # every token's targets: the same window scale
    _, every = model(x, observed, target=tokens)
    outputs, _ = model.outputs_tokens(x, observed)
    torch.testing.assert_close(every, ((outputs - tokens).abs() / scale[:, None, None, :]).mean())


def test_predict_batches_equals_one_predict_in_order():
    cfg = ModelConfig(context_len=16, horizon=4, patch_len=4, d_model=8, n_heads=2, d_ff=8, n_layers=1)
    model = trained_looking(cfg, 2).train()
    contexts = torch.randn(23, 16, 2)
    batches = list(model.predict_batches(contexts, batch_size=10))
    assert [len(b) for b in batches] == [10, 10, 3]
    torch.testing.assert_close(torch.cat(batches), model.predict(contexts), atol=1e-6, rtol=1e-6)
    assert model.training  # predict restores the mode
    assert list(model.predict_batches(contexts[:0])) == []


@pytest.mark.parametrize(("n_series", "independent", "batch"), [(7, True, 292), (1, True, 2048), (7, False, 2048)])
def test_inference_batch_holds_a_fixed_number_of_sequences(n_series, independent, batch):
    cfg = ModelConfig(context_len=8, horizon=2, patch_len=4, d_model=8, n_heads=2, d_ff=8, n_layers=1,
                      channel_independent=independent)  # fmt: skip
    model = Forecaster(cfg, layout_of(n_series))
    assert PREDICT_SEQUENCES == 2048 and model.inference_batch == batch
    assert [len(b) for b in model.predict_batches(torch.randn(batch + 1, 8, n_series))] == [batch, 1]


@pytest.mark.parametrize("kernel", ["fused", "explicit", "auto"])
def test_no_mask_means_causal_only(kernel):
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4, kernel=kernel).eval()
    x = torch.randn(3, 9, 16)
    causal = attention_mask(torch.ones(3, 9, dtype=torch.bool))  # (B, 1, T, T)
    torch.testing.assert_close(attn(x), attn(x, causal), atol=1e-6, rtol=1e-5)
    changed = x.clone()
    changed[:, 5:] += 10.0
    assert torch.equal(attn(changed)[:, :5], attn(x)[:, :5])  # the future does not reach the past


@pytest.mark.parametrize("key", ["norm=prefix", "norm=none", "head=token", "head_dim=16"])
def test_removed_model_options_are_unknown_keys(key):
    name, value = key.split("=")
    with pytest.raises(ConfigError, match=f"unknown key model.{name}"):
        config_from_dict({"model": {name: value}})
