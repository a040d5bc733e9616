"""Process-group plumbing for `torchrun` (torch DDP); a single process needs none of it."""

from __future__ import annotations

import atexit
import contextlib
import datetime
import hashlib
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from tsformer.errors import ConfigError


@dataclass(frozen=True)
class Dist:
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def is_main_process() -> bool:
    """Rank 0 under torchrun, or a single process: the one that writes the run folder."""
    return os.environ.get("RANK", "0") == "0"


def setup(device: str) -> Dist:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1); pick the device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "train.device=cuda but torch finds no usable GPU on this machine; use train.device=cpu, "
            "or auto to take a GPU when there is one"
        )
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    target = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(target)
    if world_size > 1 and not dist.is_initialized():  # once a process: a second join against torchrun's store hangs
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
        atexit.register(_leave)
    rank = dist.get_rank() if world_size > 1 else 0
    return Dist(rank=rank, world_size=world_size, device=target)


def wrap(model: torch.nn.Module, ctx: Dist) -> torch.nn.Module:
    if ctx.world_size == 1:
        return model
    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)


def any_rank(flag: bool, ctx: Dist) -> bool:
    """Whether `flag` holds on any rank (each rank's own clock, say), so that all act alike; every rank must call
    it."""
    return flag if ctx.world_size == 1 else bool(_all_reduced(float(flag), dist.ReduceOp.MAX, ctx))


def mean_over_ranks(value: float, ctx: Dist) -> float:
    """`value` averaged over every rank (each rank's own, as one process has it); every rank must call it."""
    return value if ctx.world_size == 1 else _all_reduced(value, dist.ReduceOp.SUM, ctx) / ctx.world_size


def from_main(values: tuple[float, ...], ctx: Dist) -> tuple[float, ...]:
    """Rank 0's `values` on every rank (a decision all must make alike, as early stopping on a validation score
    that a GPU's arithmetic may round differently per rank); every rank must call it."""
    if ctx.world_size == 1:
        return values
    held = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    dist.broadcast(held, src=0)
    return tuple(float(v) for v in held.tolist())


def started_on_main(ctx: Dist) -> None:
    """Every rank's first collective: rank 0 says it started the run (it claims the run folder alone, before the
    group is joined); the other ranks stop with an error where it could not (`could_not_start`)."""
    if from_main((1.0,), ctx) == (0.0,):
        raise ConfigError("rank 0 could not start the run (its own Error line says why), so this rank stopped too")


def could_not_start(device: str) -> None:
    """On rank 0, after failing before the group was joined: join it and tell the other ranks (who wait in
    `started_on_main`) to stop, rather than leave them waiting for a peer that never comes."""
    if int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return
    with contextlib.suppress(Exception):  # the error to report is the one rank 0 already has
        ctx = setup(device)
        from_main((0.0,), ctx)
        abandon()  # with the other ranks, who leave as they fail


def same_on_every_rank(text: str, ctx: Dist) -> bool:
    """Whether every rank holds the same `text` (what each read, by its fingerprint); every rank must call it."""
    if ctx.world_size == 1:
        return True
    digest = int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big")  # 48 bits: exact in a float64
    return _all_reduced(float(digest), dist.ReduceOp.MIN, ctx) == _all_reduced(float(digest), dist.ReduceOp.MAX, ctx)


def _all_reduced(value: float, op: dist.ReduceOp, ctx: Dist) -> float:
    """One number combined over the ranks by `op`."""
    held = torch.tensor([value], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(held, op=op)
    return float(held.item())


def together() -> None:
    """Wait for every rank, if a process group was joined, so no rank goes on while another still uses it. The
    group stays joined for the process's next run (`backtest --refit` trains one a fold) and is left at exit."""
    if dist.is_initialized():
        dist.barrier()


def _leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


ABANDON_WAIT = datetime.timedelta(seconds=10)


def abandon() -> None:
    """Leave the process group, if still in it, after failing: wait a while for the peers (all ranks stopped
    by the same Ctrl-C then leave together, as a clean exit needs), but not forever (they may be gone)."""
    if not dist.is_initialized():
        return
    if dist.get_backend() == "gloo":
        with contextlib.suppress(RuntimeError):
            dist.monitored_barrier(timeout=ABANDON_WAIT)
    dist.destroy_process_group()
