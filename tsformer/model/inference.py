"""What every forecaster module offers beyond its two outputs: forecasts of every token or the last,
inference in eval mode without gradients, and inference batch by batch.

A subclass provides `outputs_tokens` and `outputs_last` (point forecast and quantiles or None),
`quantile_head` (None without quantiles) and `positional_encoding` (a buffer on the model's device).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from tsformer.model.covariates import Covariates

# sequences per inference batch (evaluation, validation): a window is one sequence per series when the series go
# through the model one by one (model.channel_independent), one otherwise. 2,048 was the fastest of 448 to 4,096 on
# 2 CPU threads for ETTh1's 7 columns (292 windows) and M4's one (benchmarks/NOTES.md, session 35)
PREDICT_SEQUENCES = 2048


def inference_batch_size(n_series: int, channel_independent: bool) -> int:
    """Windows per inference batch: PREDICT_SEQUENCES sequences, each window one per series when the series go
    through the model one by one."""
    return max(1, PREDICT_SEQUENCES // (n_series if channel_independent else 1))


class ForecasterBase(nn.Module):
    """The inference methods shared by `Forecaster` and `Ensemble`."""

    def forecast_tokens(
        self, x: torch.Tensor, observed: torch.Tensor | None = None, covariates: Covariates | None = None
    ) -> torch.Tensor:
        """Every token's forecast: x (B, context_len, n_series), observed (B, context_len) bool -> (B, T, H, C)."""
        return self.outputs_tokens(x, observed, covariates)[0]

    def forecast_last(
        self, x: torch.Tensor, observed: torch.Tensor | None = None, covariates: Covariates | None = None
    ) -> torch.Tensor:
        """The last token's forecast only (heads run on one token): -> (B, H, C), = forecast_tokens(...)[:, -1]."""
        return self.outputs_last(x, observed, covariates)[0]

    @torch.no_grad()
    def _inference(
        self, x: torch.Tensor, observed: torch.Tensor | None, covariates: Covariates | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`outputs_last` in eval mode, without gradients; the training mode is restored."""
        was_training = self.training
        self.eval()
        outputs = self.outputs_last(x, observed, covariates)
        self.train(was_training)
        return outputs

    def predict(
        self, x: torch.Tensor, observed: torch.Tensor | None = None, covariates: Covariates | None = None
    ) -> torch.Tensor:
        """Forecast in eval mode: (B, context_len, C) -> (B, horizon, C)."""
        return self._inference(x, observed, covariates)[0]

    def predict_quantiles(
        self, x: torch.Tensor, observed: torch.Tensor | None = None, covariates: Covariates | None = None
    ) -> torch.Tensor:
        """The quantiles in eval mode: (B, context_len, C) -> (B, horizon, C, Q), Q = len(quantile_levels)."""
        quantiles = self._inference(x, observed, covariates)[1]
        if quantiles is None:
            raise ValueError("this model forecasts no quantiles (train --quantiles)")
        return quantiles

    def predict_batches(
        self,
        contexts: torch.Tensor,
        observed: torch.Tensor | None = None,
        covariates: Covariates | None = None,
        batch_size: int | None = None,
    ) -> Iterator[torch.Tensor]:
        """`predict` over many contexts (N, L, C) (and their observed mask and covariates), batch by batch:
        yields (batch_size, H, C) forecasts (`inference_batch` windows by default) in order, on the model's device,
        so a caller can keep them all (torch.cat) or reduce them as they come."""
        return self._batches(self.predict, contexts, observed, covariates, batch_size)

    def output_batches(
        self,
        contexts: torch.Tensor,
        observed: torch.Tensor | None = None,
        covariates: Covariates | None = None,
        batch_size: int | None = None,
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
        """Both outputs in one pass, batch by batch: yields (forecast (b, H, C), quantiles (b, H, C, Q) or None)."""
        return self._batches(self._inference, contexts, observed, covariates, batch_size)

    @property
    def inference_batch(self) -> int:
        """This model's windows per inference batch (`inference_batch_size`)."""
        return inference_batch_size(self.n_series, self.cfg.channel_independent)

    def _batches(self, method, contexts, observed, covariates, batch_size: int | None) -> Iterator[torch.Tensor]:
        """method(batch of contexts, their mask, their covariates) for each batch, on the model's device."""
        device = self.positional_encoding.device
        batch_size = batch_size or self.inference_batch
        for start in range(0, len(contexts), batch_size):
            end = start + batch_size
            mask = None if observed is None else observed[start:end].to(device)
            batch_covariates = None if covariates is None else covariates.rows(start, end, device)
            yield method(contexts[start:end].to(device), mask, batch_covariates)
