"""Process-group plumbing for `torchrun` (torch DDP); a single process needs none of it."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup(device: str) -> Dist:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1); pick the device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    target = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(target)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank = dist.get_rank() if world_size > 1 else 0
    return Dist(rank=rank, world_size=world_size, device=target)


def wrap(model: torch.nn.Module, ctx: Dist) -> torch.nn.Module:
    if ctx.world_size == 1:
        return model
    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)


def barrier(ctx: Dist) -> None:
    if ctx.world_size > 1:
        dist.barrier()
