"""Checks that the model and the data pipeline cannot see the future. Each one can fail.

Model checks run the whole forward pass in float64: changing inputs after a token's patch must
change none of the outputs at or before that token, neither in value nor through gradients.
Data checks run the real windowing code on row numbers and refit the scaler on training rows.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from tsformer.data import SPLITS, Scaler, SplitBorders, make_windows, window_target_starts
from tsformer.errors import LeakageError
from tsformer.model import Forecaster

TOLERANCE = 1e-9  # float64; a masked future contributes exactly zero in exact arithmetic


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    max_change: float
    detail: str

    def line(self) -> str:
        status = "PASS" if self.passed else "FAIL"
        return f"{status}  {self.name:<16} max change {self.max_change:.1e}  {self.detail}"


def _positions(n_tokens: int, n_checks: int) -> list[int]:
    """Tokens to probe: every token but the last (which has no future in the context), or a dense sample."""
    candidates = list(range(n_tokens - 1))
    if len(candidates) <= n_checks:
        return candidates
    picks = np.linspace(0, len(candidates) - 1, n_checks).round().astype(int)
    return sorted({candidates[i] for i in picks})


def check_model(model: Forecaster, n_checks: int = 16, seed: int = 0) -> list[CheckResult]:
    """Forward, gradient and padding checks on a float64 copy of `model` in eval mode."""
    probe = copy.deepcopy(model).double().eval()
    cfg = probe.cfg
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(2, cfg.context_len, probe.n_series, generator=generator, dtype=torch.float64)
    ends = probe.token_ends()
    positions = _positions(probe.n_tokens, n_checks)
    with torch.no_grad():
        base = probe.forecast_tokens(x)  # (B, T, H, C)
    worst_forward, worst_grad, moved_later = 0.0, 0.0, 0.0
    for k in positions:
        changed = x.clone()
        changed[:, ends[k] :] = 10 * torch.randn(changed[:, ends[k] :].shape, generator=generator, dtype=torch.float64)
        with torch.no_grad():
            out = probe.forecast_tokens(changed)
        worst_forward = max(worst_forward, (out[:, : k + 1] - base[:, : k + 1]).abs().max().item())
        moved_later = max(moved_later, (out[:, k + 1 :] - base[:, k + 1 :]).abs().max().item())
        inputs = x.clone().requires_grad_(True)
        past_outputs = probe.forecast_tokens(inputs)[:, : k + 1]
        (grad,) = torch.autograd.grad(past_outputs.sum(), inputs)
        worst_grad = max(worst_grad, grad[:, ends[k] :].abs().max().item())
    where = f"over {len(positions)} of {probe.n_tokens} positions"
    results = [
        CheckResult(
            "model/forward",
            worst_forward <= TOLERANCE,
            worst_forward,
            f"outputs at or before t after changing inputs after t, {where}",
        ),
        CheckResult("model/gradient", worst_grad <= TOLERANCE, worst_grad, f"|d y<=t / d x>t|, {where}"),
        CheckResult(
            "model/sensitive",
            moved_later > TOLERANCE or not positions,
            moved_later,
            "later outputs do respond to those inputs (the probe is not vacuous)",
        ),
    ]
    return results + [check_padding(probe, generator)]


def check_padding(model: Forecaster, generator: torch.Generator) -> CheckResult:
    """Values placed in padded (missing-history) positions must not change the forecast."""
    cfg = model.cfg
    x = torch.randn(2, cfg.context_len, model.n_series, generator=generator, dtype=torch.float64)
    history = max(1, cfg.context_len // 3)
    pad_mask = torch.zeros(2, cfg.context_len, dtype=torch.bool)
    pad_mask[:, -history:] = True
    other = x.clone()
    other[:, :-history] = 1e3 * torch.randn(other[:, :-history].shape, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        change = (model.predict(x, pad_mask) - model.predict(other, pad_mask)).abs().max().item()
    return CheckResult(
        "model/padding",
        change <= TOLERANCE,
        change,
        f"forecast after changing the {cfg.context_len - history} padded steps",
    )


def check_scaler(values: np.ndarray, borders: SplitBorders, scaler: Scaler) -> CheckResult:
    """The scaler's statistics must be those of the training rows alone."""
    refit = Scaler.fit(values[: borders.train_end])
    change = float(max(np.abs(refit.mean - scaler.mean).max(), np.abs(refit.std - scaler.std).max()))
    tolerance = 1e-5 * float(max(1.0, np.abs(refit.mean).max(), refit.std.max()))
    return CheckResult(
        "data/scaler", change <= tolerance, change, f"scaler vs. statistics of training rows 0..{borders.train_end - 1}"
    )


def check_windows(
    timestamps: pd.DatetimeIndex, borders: SplitBorders, context_len: int, horizon: int
) -> list[CheckResult]:
    """Run the real windowing on row numbers: targets stay in their split, after their inputs, and
    no target timestamp belongs to two splits."""
    rows = torch.arange(borders.test_end, dtype=torch.int64).unsqueeze(1)  # (n_rows, 1) row ids as values
    target_rows: dict[str, np.ndarray] = {}
    worst_overlap, outside = 0, 0
    for split in SPLITS:
        starts = window_target_starts(split, borders, context_len, horizon)
        windows = make_windows(rows, starts, context_len, horizon)[..., 0]  # (n_windows, L + H)
        inputs, targets = windows[:, :context_len], windows[:, context_len:]
        overlap = (inputs.max(1).values - targets.min(1).values + 1).clamp(min=0)
        worst_overlap = max(worst_overlap, int(overlap.max()) if len(overlap) else 0)
        first, end = borders.target_range(split)
        outside += int(((targets < first) | (targets >= end)).sum())
        target_rows[split] = np.unique(targets.numpy())
    shared = 0
    for i, a in enumerate(SPLITS):
        for b in SPLITS[i + 1 :]:
            shared += len(np.intersect1d(timestamps[target_rows[a]].asi8, timestamps[target_rows[b]].asi8))
    return [
        CheckResult(
            "data/window", worst_overlap == 0, float(worst_overlap), "steps a window's target shares with its own input"
        ),
        CheckResult(
            "data/splits",
            shared == 0 and outside == 0,
            float(shared + outside),
            f"target timestamps in two splits ({shared}) or outside their split ({outside})",
        ),
    ]


def check_data(
    values: np.ndarray,
    timestamps: pd.DatetimeIndex,
    borders: SplitBorders,
    scaler: Scaler,
    context_len: int,
    horizon: int,
) -> list[CheckResult]:
    """Every data check: the scaler, then the windows and splits."""
    return [check_scaler(values, borders, scaler), *check_windows(timestamps, borders, context_len, horizon)]


def require_passed(results: list[CheckResult]) -> None:
    failed = [r for r in results if not r.passed]
    if failed:
        names = ", ".join(f"{r.name} (max change {r.max_change:.1e})" for r in failed)
        raise LeakageError(f"leakage check failed: {names}; the model or pipeline can see the future")
