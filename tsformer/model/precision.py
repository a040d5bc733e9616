"""The precision of the forward's matrix products: float32, or bfloat16 under torch.autocast.

bfloat16 keeps float32's range with an 8-bit mantissa; autocast runs the products (linear layers, attention)
in it and leaves reductions, the statistics and the loss in float32. On this project's benchmarks it changed
no validation figure beyond seed noise and made the step up to 1.36x faster (benchmarks/NOTES.md, session 30).
"""

from __future__ import annotations

import contextlib

import torch


def native_bfloat16(device: torch.device) -> bool:
    """Whether `device` computes bfloat16 products in hardware: a GPU that supports it, or a CPU with
    AVX512-BF16 or AMX; elsewhere autocast emulates them, slower than float32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    cpu = torch.cpu
    probes = (getattr(cpu, "_is_avx512_bf16_supported", None), getattr(cpu, "_is_amx_tile_supported", None))
    return any(probe is not None and probe() for probe in probes)


def resolve_precision(precision: str, device: torch.device) -> str:
    """model.precision as the model trains: auto is bfloat16 where `device` computes it natively, else float32."""
    if precision != "auto":
        return precision
    return "bfloat16" if native_bfloat16(device) else "float32"


def autocast(precision: str, x: torch.Tensor) -> contextlib.AbstractContextManager:
    """The context a forward runs in: bfloat16 autocast for a bfloat16 model fed float32 (float64 inputs, the
    leakage probes', stay exact), nothing otherwise (float32, or an unresolved auto)."""
    enabled = precision == "bfloat16" and x.dtype == torch.float32
    return torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=enabled)
