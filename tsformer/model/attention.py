"""softmax(QKᵀ/√d_k)·V with causal and padding masks, single- and multi-head."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tsformer.model.dropout import Dropout

# On CPU the fused kernel costs more than the formula on rows this short (16 rows of 448 x 4 heads x 16 dims,
# interleaved medians: 15 tokens 5.5 ms fused against 2.0 ms in bfloat16, 3.9 against 1.7 in float32; from 24
# tokens the fused kernel is ahead, 4.4 against 6.2 and 5.5 against 7.2)
CPU_FORMULA_MAX_TOKENS = 16


def fused_is_faster(n_tokens: int, device: torch.device) -> bool:
    """Whether the fused kernel beats the formula (model.attention=auto): everywhere but short rows on CPU."""
    return device.type != "cpu" or n_tokens > CPU_FORMULA_MAX_TOKENS


def causal_mask(n_tokens: int, device: torch.device | None = None) -> torch.Tensor:
    """(T, T) bool, True where query i may attend key j, i.e. j <= i."""
    return torch.ones(n_tokens, n_tokens, dtype=torch.bool, device=device).tril()


def attention_mask(token_real: torch.Tensor) -> torch.Tensor:
    """Causal and padding mask, (N, 1, T, T) bool from token_real (N, T) bool.

    A query attends keys at or before it that are real; every query keeps itself, so a
    pad query (whose output is never used) still has one finite score and no NaN.
    """
    n_tokens = token_real.shape[1]
    causal = causal_mask(n_tokens, token_real.device)  # (T, T)
    keep_self = torch.eye(n_tokens, dtype=torch.bool, device=token_real.device)
    allowed = causal & (token_real[:, None, :] | keep_self)  # (N, T, T)
    return allowed.unsqueeze(1)  # (N, 1, T, T)


def scaled_dot_product(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout: nn.Module | None = None,
) -> torch.Tensor:
    """The formula: masked scores set to -inf before a row-wise softmax, then weights · V."""
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    # the row-wise softmax written out, exp(s - max) / sum exp(s - max): on CPU torch.softmax is slow on rows this
    # short (one per query over T keys); the shift is a constant of the row, so it carries no gradient
    exp = (scores - scores.detach().amax(dim=-1, keepdim=True)).exp()
    weights = exp / exp.sum(dim=-1, keepdim=True)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ v  # (..., T_q, d_v)


class MultiHeadAttention(nn.Module):
    """h heads of d_model/h dimensions each, concatenated, then Wo; output shape = input shape."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, kernel: str = "auto"):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"n_heads ({n_heads}) must divide d_model ({d_model})")
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.kernel = kernel  # fused, explicit or auto (`fused_is_faster`)
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.weights_dropout = Dropout(dropout)  # on the attention weights, in training

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.d_head).transpose(1, 2)  # (B, n_heads, T, d_head)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, d_model), mask (B or 1, 1, T, T) bool, None = causal only -> (B, T, d_model)."""
        b, t, d = x.shape
        q, k, v = self.split_heads(self.w_q(x)), self.split_heads(self.w_k(x)), self.split_heads(self.w_v(x))
        # the fused kernel where no weight is dropped (with dropout it takes the formula's path on CPU anyway, and
        # draws its mask with the slow bernoulli_); with no mask, its own causal path (`is_causal`)
        fused = self.kernel == "fused" or (self.kernel == "auto" and fused_is_faster(t, x.device))
        if fused and not (self.training and self.weights_dropout.p):
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        else:
            mask = causal_mask(t, x.device) if mask is None else mask
            heads = scaled_dot_product(q, k, v, mask, self.weights_dropout)  # (B, n_heads, T, d_head)
        concat = heads.transpose(1, 2).reshape(b, t, d)  # (B, T, n_heads * d_head)
        return self.w_o(concat)
