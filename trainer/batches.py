"""In-memory batching: the training shard of a rank, augmentation, and test shards.

The whole split is one tensor, so a batch is one indexing operation instead of a
per-sample ``Dataset``/``DataLoader`` round trip; ``DistributedSampler`` still decides
which rank sees which examples, and ``set_epoch`` reshuffles every epoch. An epoch's
order and flips are drawn up front and moved to the data's device once, so on a GPU a
batch is made there without a host round trip.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import DistributedSampler

from trainer.data import ONE_WAY_CLASSES


def local_batch_size(global_batch: int, world_size: int) -> int:
    """Per-rank batch for a global batch (at least 1)."""
    return max(1, global_batch // world_size)


def steps_per_epoch(num_examples: int, global_batch: int, world_size: int) -> int:
    """Optimizer steps per epoch on every rank (the sampler pads shards to equal size)."""
    shard = -(-num_examples // world_size)
    return -(-shard // local_batch_size(global_batch, world_size))


def epoch_plan(
    sampler: DistributedSampler,
    generator: torch.Generator | None,
    device: torch.device,
    flippable: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """This rank's example order for the epoch and, if augmenting, whom to flip.

    Each example is flipped with probability 1/2, except those that ``flippable`` (a bool
    per example of the split, on the CPU) marks False.
    """
    order = torch.tensor(list(sampler), dtype=torch.long)
    if generator is None:
        return order.to(device), None
    flips = torch.rand(len(order), generator=generator) < 0.5
    if flippable is not None:
        flips &= flippable[order]
    return order.to(device), flips.to(device)


def flippable_examples(labels: torch.Tensor, class_names: list[str]) -> torch.Tensor:
    """Per example: whether random flips may mirror it (it is not one of ONE_WAY_CLASSES)."""
    one_way = torch.tensor([name in ONE_WAY_CLASSES for name in class_names])
    return ~one_way[labels]


def batch_slices(
    order: torch.Tensor, flips: torch.Tensor | None, batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
    """(indices, flips) of each batch, in order; the last batch may be smaller."""
    for start in range(0, len(order), batch_size):
        end = start + batch_size
        yield order[start:end], None if flips is None else flips[start:end]


def gather(images: torch.Tensor, index: torch.Tensor, flips: torch.Tensor | None) -> torch.Tensor:
    """The batch ``images[index]``, each image mirrored left-right where ``flips`` is set."""
    batch = images[index]
    if flips is None:
        return batch
    return torch.where(flips[:, None, None, None], batch.flip(-1), batch)


def test_shard(num_examples: int, rank: int, world_size: int) -> torch.Tensor:
    """Indices of the test examples this rank evaluates (disjoint, covering all)."""
    return torch.tensor_split(torch.arange(num_examples), world_size)[rank]
