"""Process-group setup from the environment torchrun or a PyTorchJob pod provides."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Context:
    """Where this process sits: its ranks, the world size, and its device."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0 prints metric lines and writes files."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Whether a process group is in use."""
        return self.world_size > 1


def setup(no_cuda: bool = False, backend: str | None = None) -> Context:
    """Read RANK/LOCAL_RANK/WORLD_SIZE, pick the device, and join the process group.

    The backend follows the device (nccl on GPU, gloo on CPU) unless given. A single
    process (no WORLD_SIZE, or 1) runs without a process group.
    """
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    use_cuda = torch.cuda.is_available() and not no_cuda
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if world_size > 1:
        dist.init_process_group(backend=backend or ("nccl" if use_cuda else "gloo"))
    return Context(rank, local_rank, world_size, device)


def all_reduce_sum(values: list[float], context: Context) -> list[float]:
    """Sum a few numbers over all ranks (identity for a single process)."""
    if not context.distributed:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=context.device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def barrier(context: Context) -> None:
    """Wait for every rank (no-op for a single process)."""
    if context.distributed:
        dist.barrier()


def teardown(context: Context) -> None:
    """Leave the process group."""
    if context.distributed and dist.is_initialized():
        dist.destroy_process_group()
