"""Process-group setup from the environment a launcher provides.

Three launchers, one code path. ``torchrun`` (also in PyTorchJob and TrainJob pods) and a
PyTorchJob pod without torchrun set ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``.
A Kubeflow Trainer v2 ``torch-distributed`` pod (v2.1 to v2.3) sets only torchrun's
``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK`` (the Job completion index),
``PET_MASTER_ADDR`` and ``PET_MASTER_PORT``; started as ``python -m trainer`` there, the
trainer is the node's one process and joins from those.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from trainer.model import select_device


class LaunchError(ValueError):
    """What the flags or the environment ask for cannot run here."""


@dataclass(frozen=True)
class LaunchRanks:
    """The ranks the launcher gave this process, and how the group finds its master."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    init_method: str = "env://"


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


def launch_ranks(environ: Mapping[str, str] = os.environ) -> LaunchRanks:
    """This process's ranks, read from torchrun's/PyTorchJob's env or Trainer v2's ``PET_*``.

    Raises:
        LaunchError: a ``PET_*`` env asks for several processes per node.
    """
    if "WORLD_SIZE" in environ:
        world_size = int(environ["WORLD_SIZE"])
        return LaunchRanks(
            rank=int(environ.get("RANK", 0)),
            local_rank=int(environ.get("LOCAL_RANK", 0)),
            world_size=world_size,
            local_world_size=int(environ.get("LOCAL_WORLD_SIZE", 1)),
        )
    if "PET_NNODES" not in environ:
        return LaunchRanks()
    per_node = environ.get("PET_NPROC_PER_NODE", "1")
    if processes_per_node(per_node) != 1:
        raise LaunchError(
            f"PET_NPROC_PER_NODE={per_node} asks for {processes_per_node(per_node)} processes "
            "per node: start the trainer with `torchrun -m trainer` (it reads PET_* itself), "
            "or set the TrainJob's numProcPerNode to 1"
        )
    address, port = environ["PET_MASTER_ADDR"], environ["PET_MASTER_PORT"]
    return LaunchRanks(
        rank=int(environ.get("PET_NODE_RANK", 0)),
        world_size=int(environ["PET_NNODES"]),
        init_method=f"tcp://{address}:{port}",
    )


def processes_per_node(value: str) -> int:
    """What torchrun makes of ``--nproc-per-node``: a number, auto/gpu (GPUs) or cpu (cores)."""
    if value.isdigit():
        return int(value)
    if value in ("auto", "gpu") and torch.cuda.is_available():
        return torch.cuda.device_count()
    if value in ("auto", "cpu"):
        return os.cpu_count() or 1
    if value == "gpu":
        raise LaunchError("PET_NPROC_PER_NODE=gpu, but no CUDA device is visible")
    raise LaunchError(f"PET_NPROC_PER_NODE={value}: expected a number, auto, cpu or gpu")


def setup(device: str = "auto", backend: str | None = None) -> Context:
    """Pick the device, and join the process group when the launcher started several.

    On CUDA, process ``local_rank`` takes GPU ``local_rank`` (modulo the GPUs visible, so
    processes can share one GPU with gloo). The backend follows the device (nccl on
    CUDA, gloo on CPU) unless given.

    Raises:
        LaunchError: the env is unusable, or nccl would put two processes on one GPU.
    """
    where = launch_ranks()
    try:
        chosen = select_device(device, where.local_rank)
    except ValueError as exc:
        raise LaunchError(str(exc)) from exc
    backend = backend or ("nccl" if chosen.type == "cuda" else "gloo")
    if backend == "nccl" and where.local_world_size > torch.cuda.device_count():
        raise LaunchError(
            f"{where.local_world_size} processes per node share "
            f"{torch.cuda.device_count()} GPU(s): nccl needs one GPU per process; "
            "use --backend gloo"
        )
    if chosen.type == "cuda":
        torch.cuda.set_device(chosen)
    if where.world_size > 1:
        dist.init_process_group(
            backend=backend,
            init_method=where.init_method,
            rank=where.rank,
            world_size=where.world_size,
        )
    return Context(where.rank, where.local_rank, where.world_size, chosen)


def all_reduce_sum(values: torch.Tensor, context: Context) -> torch.Tensor:
    """Sum a tensor over all ranks (itself for a single process)."""
    if context.distributed:
        dist.all_reduce(values)
    return values


def broadcast_buffers(module: torch.nn.Module, context: Context) -> None:
    """Give every rank rank 0's buffers (batch norm's running statistics, which it saves)."""
    if context.distributed:
        for buffer in module.buffers():
            dist.broadcast(buffer, src=0)


def barrier(context: Context) -> None:
    """Wait for every rank (no-op for a single process)."""
    if context.distributed:
        dist.barrier()


def teardown(context: Context) -> None:
    """Leave the process group."""
    if context.distributed and dist.is_initialized():
        dist.destroy_process_group()
