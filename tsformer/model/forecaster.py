"""The causal Transformer forecaster: patches -> projection + PE -> N blocks -> per-token head."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from tsformer.config import ModelConfig
from tsformer.errors import ConfigError
from tsformer.layout import Layout
from tsformer.model import normalisation
from tsformer.model.attention import MultiHeadAttention, attention_mask
from tsformer.model.covariates import CovariateEmbedding, Covariates, FutureSkip, StaticEmbedding, future_windows
from tsformer.model.cycle import Cycle
from tsformer.model.dropout import Dropout
from tsformer.model.encoding import PatchProjection, sinusoidal_encoding
from tsformer.model.inference import ForecasterBase
from tsformer.model.precision import autocast

# mase: the mae of errors divided by each window's naive scale (`naive_scale`), so every window weighs as MASE does
LOSSES = {"mse": F.mse_loss, "mae": F.l1_loss, "mase": F.l1_loss}
NAIVE_SCALE_FLOOR = 0.02  # the smallest naive scale a window's errors are divided by (standardised units)


def naive_scale(x: torch.Tensor, observed: torch.Tensor | None, lag: int) -> torch.Tensor:
    """Each window's and column's in-sample naive MAE (B, C): the mean |x_t - x_(t-lag)| over its context x (B, L, C)
    where both steps are observed (lag 1 when the context is not longer than `lag`), at least NAIVE_SCALE_FLOOR;
    the floor where no pair is observed. The M4 MASE's scale, from the context alone."""
    lag = lag if x.shape[1] > lag else 1
    change = (x[:, lag:] - x[:, :-lag]).abs()  # (B, L - lag, C)
    if observed is None:
        both = torch.ones_like(change)
    else:
        seen = (observed if observed.dim() == 3 else observed.unsqueeze(-1)).expand_as(x)
        both = (seen[:, lag:] & seen[:, :-lag]).to(x.dtype)
    scale = (change * both).sum(1) / both.sum(1).clamp(min=1.0)
    return scale.clamp(min=NAIVE_SCALE_FLOOR)


def pinball_loss(
    quantiles: torch.Tensor, target: torch.Tensor, levels: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean pinball (quantile) loss: max(q (y - f), (q - 1) (y - f)) for quantiles (..., Q) of target (...),
    over the cells where `weights` (target's shape) is 1 (None: every cell)."""
    error = target.unsqueeze(-1) - quantiles  # (..., Q)
    loss = torch.maximum(levels * error, (levels - 1) * error)
    if weights is None:
        return loss.mean()
    cells = weights.unsqueeze(-1).expand_as(loss)
    return (loss * cells).sum() / cells.sum().clamp(min=1.0)


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), Dropout(dropout), nn.Linear(d_ff, d_model), Dropout(dropout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class FlattenHead(nn.Module):
    """Forecast from the states of the n_tokens tokens ending at each position (zeros before the start).

    Output k reads tokens k-T+1..k only, so the head is causal; the last output reads every token,
    like a flatten head over the whole encoded sequence.
    """

    def __init__(self, d_model: int, n_tokens: int, token_width: int, out_features: int):
        super().__init__()
        self.n_tokens = n_tokens
        self.reduce = nn.Linear(d_model, token_width)
        self.out = nn.Linear(n_tokens * token_width, out_features)

    def _reduced(self, hidden: torch.Tensor, token_real: torch.Tensor) -> torch.Tensor:
        """hidden (N, T, d) -> (N, T, e), pad tokens zeroed."""
        return self.reduce(hidden) * token_real.unsqueeze(-1).to(hidden.dtype)

    def forward(self, hidden: torch.Tensor, token_real: torch.Tensor) -> torch.Tensor:
        """Every token's forecast: hidden (N, T, d), token_real (N, T) bool -> (N, T, out_features)."""
        n, t, _ = hidden.shape
        padded = F.pad(self._reduced(hidden, token_real), (0, 0, self.n_tokens - 1, 0))  # (N, n_tokens - 1 + T, e)
        windows = padded.unfold(1, self.n_tokens, 1)  # (N, T, e, n_tokens): window k ends at token k
        return self.out(windows.transpose(2, 3).reshape(n, t, -1))  # (N, T, out_features)

    def last(self, hidden: torch.Tensor, token_real: torch.Tensor) -> torch.Tensor:
        """The last token's forecast only, equal to forward(...)[:, -1]: (N, T, d) -> (N, out_features)."""
        n = hidden.shape[0]
        return self.out(self._reduced(hidden, token_real).reshape(n, -1))  # its window is every token: (N, T*e)


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
        """Every token's: series (N, T*P, k), mask (N, T*P), mean/std (N, T, k) -> (N, T, H, k), standardised."""
        return self.linear(self.inputs(series, mask, mean, std)).transpose(2, 3)  # (N, T, H, k)

    def inputs(self, series: torch.Tensor, mask: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """What the map reads for every token: its window, standardised with its statistics, pads zero, (N, T, k,
        T*P)."""
        steps = self.n_tokens * self.patch_len
        lead = steps - self.patch_len
        padded = F.pad(series * mask.unsqueeze(-1).to(series.dtype), (0, 0, lead, 0))  # (N, lead + T*P, k)
        real = F.pad(mask, (lead, 0), value=False).to(series.dtype)  # (N, lead + T*P)
        windows = padded.unfold(1, steps, self.patch_len)  # (N, T, k, T*P): window k ends at token k's end
        window_real = real.unfold(1, steps, self.patch_len).unsqueeze(2)  # (N, T, 1, T*P)
        # times the reciprocal, not divided by std: the gradient of a division over every window's steps cost more
        return (windows - mean.unsqueeze(-1)) * (window_real * std.reciprocal().unsqueeze(-1))

    def last(self, series: torch.Tensor, mask: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """The last token's only, equal to forward(...)[:, -1]: mean/std (N, k) of the last token -> (N, H, k)."""
        return self.linear(self.last_inputs(series, mask, mean, std)).transpose(1, 2)  # (N, H, k)

    def last_inputs(
        self, series: torch.Tensor, mask: torch.Tensor, mean: torch.Tensor, std: torch.Tensor
    ) -> torch.Tensor:
        """What the map reads for the last token, equal to inputs(...)[:, -1]: (N, k, T*P)."""
        real = mask.unsqueeze(-1).to(series.dtype)  # (N, T*P, 1)
        scaled = (series * real - mean.unsqueeze(1)) * (real * std.reciprocal().unsqueeze(1))  # (N, T*P, k): all
        return scaled.transpose(1, 2)


class Block(nn.Module):
    """Pre-norm residual block; LayerNorm works per token, so it is causal. Output shape = input shape."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm_attn = nn.LayerNorm(cfg.d_model)
        self.attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.dropout_rate, kernel=cfg.attention)
        self.resid_dropout = Dropout(cfg.dropout_rate)  # on the attention branch's output
        self.norm_ff = nn.LayerNorm(cfg.d_model)
        self.ff = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout_rate)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.resid_dropout(self.attn(self.norm_attn(x), mask))
        return x + self.ff(self.norm_ff(x))


class Encoded(NamedTuple):
    """What the heads read: the padded sequences, their statistics and the final token states."""

    series: torch.Tensor  # (N, T*P, k) pads zeroed
    mask: torch.Tensor  # (N, T*P) bool, True = observed
    mean: torch.Tensor  # (N, T, k) each token's prefix statistics
    std: torch.Tensor  # (N, T, k)
    hidden: torch.Tensor | None  # (N, T, d) after the final LayerNorm; None without the Transformer
    token_real: torch.Tensor | None  # (N, T) bool, the token holds an observed step


class Forecaster(ForecasterBase):
    """Maps a context (B, context_len, n_series), and covariates if it has any, to a forecast (B, horizon, n_series).

    Every token's output is a forecast of the `horizon` steps after that token's patch, so the
    last token's output is the forecast and earlier tokens can be trained too. What it reads besides
    the targets is its `layout` (`tsformer.layout`): covariates by role, shared by the series of a
    window (`tsformer.model.covariates`); with a learned cycle (`cfg.cycle`), each step's phase.
    """

    def __init__(self, cfg: ModelConfig, layout: Layout, loss: str = "mse", quantiles: tuple[float, ...] = ()):
        super().__init__()
        self.cfg, self.layout = cfg, layout
        self.n_series = n_series = layout.n_targets
        self.register_buffer("quantile_levels", torch.tensor(sorted(quantiles)), persistent=False)
        self.n_past, self.n_future = n_past, n_features = layout.n_past, layout.n_future  # n_future: not the phase
        if (cfg.cycle or 0) != layout.cycle:
            raise ValueError(f"model.cycle {cfg.cycle} but the layout gives the phase of a cycle of {layout.cycle}")
        if loss not in LOSSES:  # "auto" is chosen from the data before training (tsformer.data.choices)
            raise ConfigError(f"train.loss must be {' or '.join(LOSSES)} when a model is built, got {loss!r}")
        self.loss_fn, self.scale_free = LOSSES[loss], loss == "mase"
        self.n_tokens = cfg.n_tokens
        self.pad_len = self.n_tokens * cfg.patch_len - cfg.context_len  # left pad to whole patches
        self.token_channels = 1 if cfg.channel_independent else n_series
        self.register_buffer("positional_encoding", sinusoidal_encoding(self.n_tokens, cfg.d_model), persistent=False)
        # built in this order so that a seed draws the same weights as before the cycle and the ablation existed
        self.projection = self.input_dropout = self.blocks = self.final_norm = None
        self.head = self.quantile_head = self.covariate_embedding = self.static_embedding = None
        transformer = cfg.transformer  # false: the benchmark's ablation, the skips and the cycle alone
        if transformer:
            n_extra = 2 * self.token_channels if cfg.stats_features else 0
            self.projection = PatchProjection(cfg.patch_len, self.token_channels, cfg.d_model, n_extra)
            self.input_dropout = Dropout(cfg.dropout_rate)
            self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
            self.final_norm = nn.LayerNorm(cfg.d_model)
        self.context_skip = ContextSkip(self.n_tokens, cfg.patch_len, cfg.horizon) if cfg.context_skip else None
        out_features = cfg.horizon * self.token_channels
        if transformer:
            self.head = FlattenHead(cfg.d_model, self.n_tokens, cfg.head_token_width, out_features)
            if n_past + n_features:
                self.covariate_embedding = CovariateEmbedding(
                    cfg.patch_len, cfg.horizon, n_past, n_features, cfg.d_model
                )
        self.future_skip = None
        if n_features:
            self.future_skip = FutureSkip(cfg.patch_len, cfg.horizon, n_features, self.token_channels)
        if transformer and quantiles:  # offsets from the point forecast, sorted so that they never cross
            self.quantile_head = FlattenHead(
                cfg.d_model, self.n_tokens, cfg.head_token_width, out_features * len(quantiles)
            )
        self.cycle = Cycle(cfg.cycle, n_series) if cfg.cycle else None
        if transformer and layout.static:  # the ablation reads no static covariates (nor past-only ones)
            self.static_embedding = StaticEmbedding(len(layout.static_numeric), layout.cardinalities, cfg.d_model)

    def token_ends(self) -> list[int]:
        """Exclusive end, in context steps, of each token's patch: output k sees steps < end k only."""
        p = self.cfg.patch_len
        return [(k + 1) * p - self.pad_len for k in range(self.n_tokens)]

    def token_targets(self, window: torch.Tensor) -> torch.Tensor:
        """The horizon after each token's patch: window (B, context_len + horizon, C) -> (B, T, H, C)."""
        span = window[:, self.token_ends()[0] :]  # (B, (T-1)*P + H, C): from the end of the first token
        return span.unfold(1, self.cfg.horizon, self.cfg.patch_len).permute(0, 1, 3, 2)  # (B, T, H, C)

    def outputs_tokens(
        self, x: torch.Tensor, observed: torch.Tensor | None = None, covariates: Covariates | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Every token's forecast (B, T, H, C) and, with quantiles, its quantiles (B, T, H, C, Q)."""
        return self._at_precision(self._outputs_tokens, x, observed, covariates)

    def outputs_last(
        self, x: torch.Tensor, observed: torch.Tensor | None = None, covariates: Covariates | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The last token's forecast (B, H, C) and quantiles (B, H, C, Q) or None; = outputs_tokens(...)[:, -1]."""
        return self._at_precision(self._outputs_last, x, observed, covariates)

    def _at_precision(self, outputs, x, observed, covariates) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`outputs`(x, observed, covariates) under the model's precision (`tsformer.model.precision`), the point
        forecast and quantiles returned in x's dtype (float32 after a bfloat16 autocast)."""
        with autocast(self.cfg.precision, x):
            point, quantiles = outputs(x, observed, covariates)
        return point.to(x.dtype), None if quantiles is None else quantiles.to(x.dtype)

    def _outputs_tokens(
        self, x: torch.Tensor, observed: torch.Tensor | None, covariates: Covariates | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        features, phase = self._read_covariates(covariates)
        if phase is not None:
            x = x - self.cycle(phase[:, : self.cfg.context_len])  # (B, L, C): the residual of the cycle
        enc = self._encode(x, observed, features)
        n, t, h, k = enc.series.shape[0], self.n_tokens, self.cfg.horizon, self.token_channels
        out = enc.series.new_zeros(n, t, h, k)  # (N, T, H, k), standardised
        if self.head is not None:
            out = out + self.head(enc.hidden, enc.token_real).view(n, t, h, k)
        if self.context_skip is not None:
            out = out + self.context_skip(enc.series, enc.mask, enc.mean, enc.std)
        if self.future_skip is not None:
            out = out + self._per_sequence(self.future_skip(features.future, self.pad_len))
        mean, std = enc.mean.unsqueeze(2), enc.std.unsqueeze(2)  # (N, T, 1, k)
        point, quantiles = self._to_series(out * std + mean, x.shape[0]), None
        if self.quantile_head is not None:
            offsets = self.quantile_head(enc.hidden, enc.token_real).view(n, t, h, k, -1)  # (N, T, H, k, Q)
            levels = (out.unsqueeze(-1) + offsets).sort(dim=-1).values  # never crossing
            quantiles = self._quantiles_to_series(levels * std.unsqueeze(-1) + mean.unsqueeze(-1), x.shape[0])
        if phase is None:
            return point, quantiles
        ahead = future_windows(phase.unsqueeze(-1), self.pad_len, self.cfg.patch_len, h)[:, :, -h:, 0]  # (B, T, H)
        return self._add_cycle(point, quantiles, ahead)  # token k's: the H steps after its patch

    def _outputs_last(
        self, x: torch.Tensor, observed: torch.Tensor | None, covariates: Covariates | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        features, phase = self._read_covariates(covariates)
        length = self.cfg.context_len
        if phase is not None:
            x = x - self.cycle(phase[:, :length])  # (B, L, C)
        enc = self._encode(x, observed, features)
        n, h, k = enc.series.shape[0], self.cfg.horizon, self.token_channels
        mean, std = enc.mean[:, -1].unsqueeze(1), enc.std[:, -1].unsqueeze(1)  # (N, 1, k) each
        out = enc.series.new_zeros(n, h, k)  # (N, H, k), standardised
        if self.head is not None:
            out = out + self.head.last(enc.hidden, enc.token_real).view(n, h, k)
        if self.context_skip is not None:
            out = out + self.context_skip.last(enc.series, enc.mask, mean[:, 0], std[:, 0])
        if self.future_skip is not None:
            out = out + self._per_sequence(self.future_skip.last(features.future))
        point, quantiles = self._to_series(out * std + mean, x.shape[0]), None
        if self.quantile_head is not None:
            offsets = self.quantile_head.last(enc.hidden, enc.token_real).view(n, h, k, -1)  # (N, H, k, Q)
            levels = (out.unsqueeze(-1) + offsets).sort(dim=-1).values
            quantiles = self._quantiles_to_series(levels * std.unsqueeze(-1) + mean.unsqueeze(-1), x.shape[0])
        if phase is None:
            return point, quantiles
        return self._add_cycle(point, quantiles, phase[:, length : length + h])  # the horizon's phases (B, H)

    def _add_cycle(
        self, point: torch.Tensor, quantiles: torch.Tensor | None, ahead: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The learned cycle at the phases `ahead` (B, ..., H) of the forecast steps, added to the point
        forecast (B, ..., H, C) and to every quantile (B, ..., H, C, Q)."""
        cycle = self.cycle(ahead)  # (B, ..., H, C)
        return point + cycle, None if quantiles is None else quantiles + cycle.unsqueeze(-1)

    def _quantiles_to_series(self, levels: torch.Tensor, b: int) -> torch.Tensor:
        """(N, ..., H, k, Q) -> (B, ..., H, C, Q)."""
        return self._to_series(levels.movedim(-1, 1), b).movedim(1, -1)

    def skip_rows(
        self,
        x: torch.Tensor,
        observed: torch.Tensor | None,
        target: torch.Tensor,
        target_observed: torch.Tensor | None,
        last_token: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The context skip's least-squares rows from contexts x (B, L, C) and every token's targets (B, T, H, C)
        (`token_targets`): its inputs times the token's std (R, T*P) and the targets less the token's mean (R, H),
        so that a row's squared error is the training loss's MSE of that token's forecast; one row per token and
        sequence with a real step and every target observed (`last_token`: the last token's rows only, whose
        window is the whole context, as a forecast reads it)."""
        series, mask = self._sequences(x, observed)  # (N, T*P, k), (N, T*P)
        mean, std = normalisation.instance_stats(series, mask, self.cfg.patch_len)  # (N, T, k) each
        if last_token:
            mean, std = mean[:, -1], std[:, -1]  # (N, k) each
            inputs = self.context_skip.last_inputs(series, mask, mean, std) * std.unsqueeze(-1)  # (N, k, T*P)
            targets = self._per_token_sequences(target[:, -1:])[:, 0] - mean.unsqueeze(1)  # (N, H, k)
            keep = mask[:, -self.cfg.patch_len :].any(-1, keepdim=True).expand_as(mean)  # (N, k): a real last step
            if target_observed is not None:
                keep = keep & self._per_token_sequences(target_observed[:, -1:])[:, 0].all(1)  # (N, k)
            return inputs[keep], targets.transpose(1, 2)[keep]  # (R, T*P), (R, H)
        inputs = self.context_skip.inputs(series, mask, mean, std) * std.unsqueeze(-1)  # (N, T, k, T*P)
        targets = self._per_token_sequences(target) - mean.unsqueeze(2)  # (N, T, H, k)
        keep = mask.view(mask.shape[0], self.n_tokens, -1).any(-1).unsqueeze(-1).expand_as(mean)  # (N, T, k)
        if target_observed is not None:
            keep = keep & self._per_token_sequences(target_observed).all(2)
        return inputs[keep], targets.transpose(2, 3)[keep]  # (R, T*P), (R, H)

    def _per_token_sequences(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, T, H, C) -> (N, T, H, k): channel-independent series as sequences of their own."""
        if not self.cfg.channel_independent:
            return tokens
        b, t, h, c = tokens.shape
        return tokens.permute(0, 3, 1, 2).reshape(b * c, t, h, 1)  # sequence (b, c) is b * C + c, as `_sequences`

    def _read_covariates(self, covariates: Covariates | None) -> tuple[Covariates | None, torch.Tensor | None]:
        """The batch's covariates (a model built with a role requires it, and refuses one it was not built
        with), as the features the embeddings and the future skip read, and each step's phase (B, L + H) for
        the learned cycle (None without one)."""
        if not self.layout.reads_covariates:
            if covariates is not None and any(t is not None for t in covariates):
                raise ValueError("this model reads no covariates; pass none")
            return None, None
        wanted = {
            "past": self.n_past > 0,
            "future": self.n_future > 0,
            "phase": self.cycle is not None,
            "static_values": bool(self.layout.static_numeric),
            "static_codes": bool(self.layout.static_categorical),
        }
        given = {name: covariates is not None and getattr(covariates, name) is not None for name in wanted}
        if given != wanted:
            needs = ", ".join(name for name, on in wanted.items() if on)
            raise ValueError(f"this model reads the covariate roles {needs}; pass those and no others")
        return covariates._replace(phase=None), covariates.phase

    def _per_sequence(self, out: torch.Tensor) -> torch.Tensor:
        """(B, ...) shared by a window's series -> (N, ...), one per sequence (N = B * C when independent)."""
        return out.repeat_interleave(self.n_series, dim=0) if self.cfg.channel_independent else out

    def _encode(self, x: torch.Tensor, observed: torch.Tensor | None, features: Covariates | None) -> Encoded:
        """Sequences, their causal statistics, and the blocks' output for every token (None without them)."""
        b, length, c = x.shape
        if length != self.cfg.context_len or c != self.n_series:
            raise ValueError(f"expected (B, {self.cfg.context_len}, {self.n_series}) input, got {tuple(x.shape)}")
        series, mask = self._sequences(x, observed)  # (N, T*P, k), (N, T*P)
        mean, std = normalisation.instance_stats(series, mask, self.cfg.patch_len)  # (N, T, k) each
        if self.projection is None:
            return Encoded(series, mask, mean, std, None, None)
        hidden, token_real = self._embed(series, mask, mean, std)  # (N, T, d), (N, T)
        if self.covariate_embedding is not None:
            embedded = self.covariate_embedding(features, self.pad_len, self.n_tokens)  # (B, T, d)
            hidden = hidden + self._per_sequence(embedded)
        if self.static_embedding is not None:  # the same for every token of a series
            static = self.static_embedding(features.static_values, features.static_codes)  # (B, d)
            hidden = hidden + self._per_sequence(static).unsqueeze(1)  # (N, T, d)
        attn_mask = None if observed is None else attention_mask(token_real)  # (N, 1, T, T); None: causal only
        for block in self.blocks:
            hidden = block(hidden, attn_mask)
        return Encoded(series, mask, mean, std, self.final_norm(hidden), token_real)

    def _to_series(self, out: torch.Tensor, b: int) -> torch.Tensor:
        """(N, ..., H, k) -> (B, ..., H, C): channel-independent sequences back to their series."""
        if not self.cfg.channel_independent:
            return out
        return out.view(b, self.n_series, *out.shape[1:-1]).movedim(1, -1)  # (B, ..., H, C)

    def _sequences(self, x: torch.Tensor, observed: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero the pads, left-pad to whole patches, split channels if independent: (N, T*P, k), (N, T*P)."""
        b, length, c = x.shape
        if observed is None:
            observed = torch.ones(b, length, dtype=torch.bool, device=x.device)
        else:
            cells = observed if observed.dim() == 3 else observed.unsqueeze(-1)  # (B, L, C or 1)
            x = torch.where(cells, x, torch.zeros((), dtype=x.dtype, device=x.device))
        x = F.pad(x, (0, 0, self.pad_len, 0))  # (B, T*P, C)
        if not self.cfg.channel_independent:
            steps_observed = observed.all(-1) if observed.dim() == 3 else observed  # a step: every series observed
            return x, F.pad(steps_observed, (self.pad_len, 0), value=False)  # (B, T*P, C), (B, T*P)
        steps = x.shape[1]
        sequences = x.permute(0, 2, 1).reshape(b * c, steps, 1)  # (B*C, T*P, 1)
        if observed.dim() == 3:  # each series its own mask
            mask = F.pad(observed.permute(0, 2, 1).reshape(b * c, length), (self.pad_len, 0), value=False)
        else:
            mask = F.pad(observed, (self.pad_len, 0), value=False).repeat_interleave(c, dim=0)  # (B*C, T*P)
        return sequences, mask

    def _embed(self, series: torch.Tensor, mask: torch.Tensor, mean: torch.Tensor, std: torch.Tensor):
        """X = projection(standardised patches, their pad mask[, token statistics]) + PE: (N, T, d), (N, T)."""
        n, t, p, k = series.shape[0], self.n_tokens, self.cfg.patch_len, self.token_channels
        patches = (series.view(n, t, p, k) - mean.unsqueeze(2)) / std.unsqueeze(2)  # (N, T, P, k)
        patch_mask = mask.view(n, t, p)  # (N, T, P)
        token_real = patch_mask.any(-1)  # (N, T)
        extra = None
        if self.cfg.stats_features:  # each token's own statistics, so levels stay comparable across tokens
            extra = torch.cat([mean, std.log()], dim=-1) * token_real.unsqueeze(-1).to(series.dtype)  # (N, T, 2k)
        hidden = self.projection(patches, patch_mask, extra) + self.positional_encoding
        return self.input_dropout(hidden), token_real

    def forward(
        self,
        x: torch.Tensor,
        observed: torch.Tensor | None = None,
        target: torch.Tensor | None = None,
        target_observed: torch.Tensor | None = None,
        covariates: Covariates | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """-> (forecast (B, H, C), loss). target is (B, H, C) for the last token or (B, T, H, C) for all.

        observed: (B, L) or (B, L, C) bool, False where an input step or cell is padding or unobserved;
        target_observed: target's shape, the loss averages over True cells only (None: every cell).
        Without a target only the last token's forecast is computed.
        """
        if target is None:
            return self.forecast_last(x, observed, covariates), None
        tokens, quantiles = self.outputs_tokens(x, observed, covariates)
        forecast = tokens[:, -1]
        every_token = target.dim() == 4
        predicted = tokens if every_token else forecast
        weights = None if target_observed is None else target_observed.to(predicted.dtype)
        if quantiles is not None and not every_token:
            quantiles = quantiles[:, -1]  # (B, H, C, Q)
        if self.scale_free:  # errors in units of each window's naive MAE: (B, 1, C), or (B, 1, 1, C) for every token
            scale = naive_scale(x, observed, self.cfg.patch_len).view(x.shape[0], *[1] * (target.dim() - 2), -1)
            predicted, target = predicted / scale, target / scale
            quantiles = None if quantiles is None else quantiles / scale.unsqueeze(-1)
        if weights is None:
            loss = self.loss_fn(predicted, target)
        else:
            loss = (self.loss_fn(predicted, target, reduction="none") * weights).sum() / weights.sum().clamp(min=1.0)
        if quantiles is not None:
            loss = loss + pinball_loss(quantiles, target, self.quantile_levels, weights)
        return forecast, loss
