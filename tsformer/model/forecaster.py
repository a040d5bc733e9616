"""The causal Transformer forecaster: patches -> projection + PE -> N blocks -> per-token head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tsformer.config import ModelConfig
from tsformer.model import normalisation
from tsformer.model.attention import MultiHeadAttention, attention_mask
from tsformer.model.encoding import PatchProjection, sinusoidal_encoding

LOSSES = {
    "mse": F.mse_loss,
    "mae": F.l1_loss,
    "huber": F.huber_loss,
}


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class FlattenHead(nn.Module):
    """Forecast from the states of the n_tokens tokens ending at each position (zeros before the start).

    Output k reads tokens k-T+1..k only, so the head is causal; the last output reads every token,
    like a flatten head over the whole encoded sequence.
    """

    def __init__(self, d_model: int, n_tokens: int, head_dim: int, out_features: int):
        super().__init__()
        self.n_tokens = n_tokens
        self.reduce = nn.Linear(d_model, head_dim)
        self.out = nn.Linear(n_tokens * head_dim, out_features)

    def forward(self, hidden: torch.Tensor, token_real: torch.Tensor) -> torch.Tensor:
        """hidden (N, T, d), token_real (N, T) bool -> (N, T, out_features)."""
        n, t, _ = hidden.shape
        reduced = self.reduce(hidden) * token_real.unsqueeze(-1).to(hidden.dtype)  # (N, T, e), pads zeroed
        padded = F.pad(reduced, (0, 0, self.n_tokens - 1, 0))  # (N, n_tokens - 1 + T, e)
        windows = padded.unfold(1, self.n_tokens, 1)  # (N, T, e, n_tokens): window k ends at token k
        return self.out(windows.transpose(2, 3).reshape(n, t, -1))  # (N, T, out_features)


class TokenHead(nn.Module):
    """Forecast from each token's own state."""

    def __init__(self, d_model: int, out_features: int):
        super().__init__()
        self.out = nn.Linear(d_model, out_features)

    def forward(self, hidden: torch.Tensor, token_real: torch.Tensor) -> torch.Tensor:
        return self.out(hidden)


class ContextSkip(nn.Module):
    """A linear map of the context ending at each token, standardised with that token's statistics.

    Window k holds the n_tokens * patch_len steps before the end of token k (zeros before the start),
    so output k still sees nothing after token k; for the last token it is the whole context.
    """

    def __init__(self, n_tokens: int, patch_len: int, horizon: int):
        super().__init__()
        self.n_tokens, self.patch_len = n_tokens, patch_len
        self.linear = nn.Linear(n_tokens * patch_len, horizon)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, series: torch.Tensor, mask: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """series (N, T*P, k), mask (N, T*P), mean/std (N, T, k) -> (N, T, H, k) in standardised units."""
        steps = self.n_tokens * self.patch_len
        lead = steps - self.patch_len
        padded = F.pad(series * mask.unsqueeze(-1).to(series.dtype), (0, 0, lead, 0))  # (N, lead + T*P, k)
        real = F.pad(mask, (lead, 0), value=False).to(series.dtype)  # (N, lead + T*P)
        windows = padded.unfold(1, steps, self.patch_len)  # (N, T, k, T*P): window k ends at token k's end
        window_real = real.unfold(1, steps, self.patch_len).unsqueeze(2)  # (N, T, 1, T*P)
        scaled = (windows - mean.unsqueeze(-1)) / std.unsqueeze(-1) * window_real
        return self.linear(scaled).transpose(2, 3)  # (N, T, H, k)


class Block(nn.Module):
    """Pre-norm residual block; LayerNorm works per token, so it is causal. Output shape = input shape."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm_attn = nn.LayerNorm(cfg.d_model)
        self.attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout, fused=cfg.attention == "fused")
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.norm_ff = nn.LayerNorm(cfg.d_model)
        self.ff = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn_dropout(self.attn(self.norm_attn(x), mask))
        return x + self.ff(self.norm_ff(x))


class Forecaster(nn.Module):
    """Maps a context (B, context_len, n_series) to a forecast (B, horizon, n_series).

    Every token's output is a forecast of the `horizon` steps after that token's patch, so the
    last token's output is the forecast and earlier tokens can be trained too.
    """

    def __init__(self, cfg: ModelConfig, n_series: int, loss: str = "mse"):
        super().__init__()
        self.cfg = cfg
        self.n_series = n_series
        self.loss_fn = LOSSES[loss]
        self.n_tokens = cfg.n_tokens
        self.pad_len = self.n_tokens * cfg.patch_len - cfg.context_len  # left pad to whole patches
        self.token_channels = 1 if cfg.channel_independent else n_series
        self.stats_features = cfg.stats_features and cfg.norm != "none"
        n_extra = 2 * self.token_channels if self.stats_features else 0
        self.projection = PatchProjection(cfg.patch_len, self.token_channels, cfg.d_model, n_extra)
        self.register_buffer("positional_encoding", sinusoidal_encoding(self.n_tokens, cfg.d_model), persistent=False)
        self.input_dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model)
        self.context_skip = ContextSkip(self.n_tokens, cfg.patch_len, cfg.horizon) if cfg.context_skip else None
        out_features = cfg.horizon * self.token_channels
        if cfg.head == "flatten":
            self.head = FlattenHead(cfg.d_model, self.n_tokens, cfg.head_dim, out_features)
        else:
            self.head = TokenHead(cfg.d_model, out_features)

    def token_ends(self) -> list[int]:
        """Exclusive end, in context steps, of each token's patch: output k sees steps < end k only."""
        p = self.cfg.patch_len
        return [(k + 1) * p - self.pad_len for k in range(self.n_tokens)]

    def forecast_tokens(self, x: torch.Tensor, pad_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, context_len, n_series), pad_mask (B, context_len) bool, True = real -> (B, T, horizon, n_series)."""
        b, length, c = x.shape
        if length != self.cfg.context_len or c != self.n_series:
            raise ValueError(f"expected (B, {self.cfg.context_len}, {self.n_series}) input, got {tuple(x.shape)}")
        series, mask = self._sequences(x, pad_mask)  # (N, T*P, k), (N, T*P)
        n, t, h, k = series.shape[0], self.n_tokens, self.cfg.horizon, self.token_channels
        mean, std = normalisation.instance_stats(series, mask, self.cfg.patch_len, self.cfg.norm)  # (N, T, k) each
        hidden, token_real = self._embed(series, mask, mean, std)  # (N, T, d), (N, T)
        attn_mask = attention_mask(token_real)  # (N, 1, T, T)
        for block in self.blocks:
            hidden = block(hidden, attn_mask)
        out = self.head(self.final_norm(hidden), token_real).view(n, t, h, k)  # (N, T, H, k), standardised
        if self.context_skip is not None:
            out = out + self.context_skip(series, mask, mean, std)
        out = out * std.unsqueeze(2) + mean.unsqueeze(2)
        if self.cfg.channel_independent:
            out = out.view(b, c, t, h).permute(0, 2, 3, 1)  # (B, T, H, C)
        return out

    def _sequences(self, x: torch.Tensor, pad_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero the pads, left-pad to whole patches, split channels if independent: (N, T*P, k), (N, T*P)."""
        b, length, c = x.shape
        if pad_mask is None:
            pad_mask = torch.ones(b, length, dtype=torch.bool, device=x.device)
        x = torch.where(pad_mask.unsqueeze(-1), x, torch.zeros((), dtype=x.dtype, device=x.device))
        x = F.pad(x, (0, 0, self.pad_len, 0))  # (B, T*P, C)
        mask = F.pad(pad_mask, (self.pad_len, 0), value=False)  # (B, T*P)
        if not self.cfg.channel_independent:
            return x, mask
        steps = x.shape[1]
        return x.permute(0, 2, 1).reshape(b * c, steps, 1), mask.repeat_interleave(c, dim=0)  # (B*C, T*P, 1)

    def _embed(self, series: torch.Tensor, mask: torch.Tensor, mean: torch.Tensor, std: torch.Tensor):
        """X = projection(standardised patches, their pad mask[, token statistics]) + PE: (N, T, d), (N, T)."""
        n, t, p, k = series.shape[0], self.n_tokens, self.cfg.patch_len, self.token_channels
        patches = (series.view(n, t, p, k) - mean.unsqueeze(2)) / std.unsqueeze(2)  # (N, T, P, k)
        patch_mask = mask.view(n, t, p)  # (N, T, P)
        token_real = patch_mask.any(-1)  # (N, T)
        extra = None
        if self.stats_features:  # each token's own statistics, so levels stay comparable across tokens
            extra = torch.cat([mean, std.log()], dim=-1) * token_real.unsqueeze(-1).to(series.dtype)  # (N, T, 2k)
        hidden = self.projection(patches, patch_mask, extra) + self.positional_encoding
        return self.input_dropout(hidden), token_real

    def split_window(self, window: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """window (B, context_len + horizon, C) -> context (B, L, C), every token's target (B, T, H, C)."""
        p, t, h = self.cfg.patch_len, self.n_tokens, self.cfg.horizon
        context = window[:, : self.cfg.context_len]
        first_end = p - self.pad_len
        span = window[:, first_end : first_end + (t - 1) * p + h]  # (B, (T-1)*P + H, C)
        targets = span.unfold(1, h, p).permute(0, 1, 3, 2)  # (B, T, H, C)
        return context, targets

    def forward(
        self, x: torch.Tensor, pad_mask: torch.Tensor | None = None, target: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """-> (forecast (B, H, C), loss). target is (B, H, C) for the last token or (B, T, H, C) for all."""
        tokens = self.forecast_tokens(x, pad_mask)
        forecast = tokens[:, -1]
        if target is None:
            return forecast, None
        loss = self.loss_fn(tokens if target.dim() == 4 else forecast, target)
        return forecast, loss

    @torch.no_grad()
    def predict(self, x: torch.Tensor, pad_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Forecast in eval mode: (B, context_len, C) -> (B, horizon, C)."""
        was_training = self.training
        self.eval()
        forecast, _ = self(x, pad_mask)
        self.train(was_training)
        return forecast
