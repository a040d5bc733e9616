"""Learning-rate schedule as a pure function of the step."""

from __future__ import annotations

import math


def lr_at(step: int, total_steps: int, base_lr: float, warmup_frac: float = 0.05, min_lr_ratio: float = 0.05) -> float:
    """Linear warm-up to `base_lr`, then cosine decay to `base_lr * min_lr_ratio` at `total_steps`."""
    warmup = int(total_steps * warmup_frac)
    if step < warmup:
        return base_lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    min_lr = base_lr * min_lr_ratio
    return min_lr + 0.5 * (base_lr - min_lr) * (1 + math.cos(math.pi * progress))
