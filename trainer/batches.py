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
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """This rank's example order for the epoch and, if augmenting, whom to flip."""
    order = torch.tensor(list(sampler), dtype=torch.long)
    flips = None if generator is None else torch.rand(len(order), generator=generator) < 0.5
    return order.to(device), None if flips is None else flips.to(device)


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
