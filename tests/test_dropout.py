"""The model's dropout: the rate, the scale, eval, and the attention path it takes in training."""

import pytest
import torch

from tsformer.model import MultiHeadAttention
from tsformer.model.dropout import LEVELS, Dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_each_element_is_dropped_at_the_rate_and_the_rest_scaled(p):
    torch.manual_seed(0)
    mask = keep_mask(torch.Size([400, 1001]), p, torch.float32, torch.device("cpu"))  # odd count: a part word
    dropped = round(p * LEVELS) / LEVELS
    assert set(mask.unique().tolist()) == pytest.approx([0.0, 1.0 / (1.0 - dropped)])
    assert (mask == 0).float().mean().item() == pytest.approx(p, abs=0.003)  # 400,400 draws: 5 standard errors
    assert mask.mean().item() == pytest.approx(1.0, abs=0.01)  # inverted dropout keeps the expectation


def test_the_sixteen_bit_slots_of_a_word_are_alike():
    torch.manual_seed(1)
    mask = keep_mask(torch.Size([200_000, 4]), 0.3, torch.float32, torch.device("cpu"))  # column j = slot j
    kept = (mask > 0).float().mean(0)
    assert kept.tolist() == pytest.approx([0.7] * 4, abs=0.005)


def test_dropout_is_the_identity_in_eval_and_at_zero():
    x = torch.randn(8, 5, 16)
    layer = Dropout(0.3).eval()
    assert torch.equal(layer(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)
    with pytest.raises(ValueError, match="dropout must be in"):
        Dropout(1.0)


def test_gradient_flows_only_through_kept_elements():
    torch.manual_seed(2)
    x = torch.randn(64, 32, requires_grad=True)
    out = Dropout(0.5).train()(x)
    out.sum().backward()
    kept = out.detach() != 0
    assert torch.allclose(x.grad[kept], torch.full_like(x.grad[kept], 2.0))
    assert torch.all(x.grad[~kept] == 0)


def test_attention_in_training_drops_weights_and_stays_causal():
    torch.manual_seed(3)
    attention = MultiHeadAttention(d_model=16, n_heads=4, dropout=0.3).train()
    x = torch.randn(4, 6, 16, requires_grad=True)
    out = attention(x)
    out[:, 2].sum().backward()  # query 2 may read keys 0..2 only
    assert torch.all(x.grad[:, 3:] == 0)
    assert x.grad[:, :3].abs().sum() > 0
    attention.eval()
    assert torch.equal(attention(x), attention(x))  # no dropout in eval


def test_a_model_takes_its_configs_dropout_and_the_usual_one_while_it_is_automatic():
    from tsformer.config import ModelConfig
    from tsformer.layout import Layout
    from tsformer.model import Forecaster

    def rates(dropout):
        cfg = ModelConfig(context_len=48, patch_len=24, horizon=24, d_model=8, n_heads=2, dropout=dropout)
        return {m.p for m in Forecaster(cfg, Layout(("y",))).modules() if isinstance(m, Dropout)}

    assert rates(None) == {0.3} and rates(0.1) == {0.1}
