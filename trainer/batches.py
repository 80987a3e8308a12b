"""In-memory batching: the training shard of a rank, augmentation, and test shards.

The whole split is one tensor, so a batch is one indexing operation instead of a
per-sample ``Dataset``/``DataLoader`` round trip; ``DistributedSampler`` still decides
which rank sees which examples, and ``set_epoch`` reshuffles every epoch.
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


def train_batches(
    images: torch.Tensor,
    labels: torch.Tensor,
    sampler: DistributedSampler,
    batch_size: int,
    generator: torch.Generator | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield this rank's (images, labels) batches in sampler order, flipped when asked."""
    order = torch.tensor(list(sampler), dtype=torch.long)
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size]
        batch = images[index]
        if generator is not None:
            batch = random_flip(batch, generator)
        yield batch, labels[index]


def random_flip(batch: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Mirror each image left-right with probability 1/2 (garments stay garments)."""
    flip = torch.rand(len(batch), generator=generator) < 0.5
    return torch.where(flip[:, None, None, None], batch.flip(-1), batch)


def test_shard(num_examples: int, rank: int, world_size: int) -> torch.Tensor:
    """Indices of the test examples this rank evaluates (disjoint, covering all)."""
    return torch.tensor_split(torch.arange(num_examples), world_size)[rank]
