"""Sharding arithmetic, batching and augmentation, without a process group."""

import torch
from torch.utils.data import DistributedSampler

from trainer import batches


def test_shards_of_all_ranks_cover_the_data_once_per_epoch():
    seen = []
    for rank in range(3):
        sampler = DistributedSampler(range(10), num_replicas=3, rank=rank, seed=1)
        sampler.set_epoch(4)
        seen += list(sampler)
    assert set(seen) == set(range(10)) and len(seen) == 12  # padded to 4 per rank
    sampler.set_epoch(5)
    assert list(sampler) != seen[8:]


def test_batch_arithmetic():
    assert batches.local_batch_size(128, 2) == 64
    assert batches.local_batch_size(1, 4) == 1
    assert batches.steps_per_epoch(60_000, 128, 2) == 469
    assert batches.steps_per_epoch(60_000, 32, 1) == 1875


def test_test_shards_are_disjoint_and_complete():
    parts = [batches.test_shard(10, rank, 3) for rank in range(3)]
    assert torch.cat(parts).tolist() == list(range(10))


def test_train_batches_follow_the_sampler():
    images = torch.arange(10, dtype=torch.float32).reshape(10, 1, 1, 1).expand(10, 1, 28, 28)
    labels = torch.arange(10)
    sampler = DistributedSampler(range(10), num_replicas=2, rank=1, seed=0)
    got = list(batches.train_batches(images, labels, sampler, batch_size=2))
    assert [len(y) for _, y in got] == [2, 2, 1]
    assert torch.cat([y for _, y in got]).tolist() == list(sampler)
    assert all(torch.equal(x[:, 0, 0, 0], y.float()) for x, y in got)


def test_random_flip_mirrors_about_half_deterministically():
    batch = torch.zeros(64, 1, 28, 28)
    batch[:, 0, 10:18, 0:4] = 1.0  # a bar at the left edge
    out1 = batches.random_flip(batch, torch.Generator().manual_seed(3))
    out2 = batches.random_flip(batch, torch.Generator().manual_seed(3))
    assert torch.equal(out1, out2)
    flipped = out1[:, 0, 10:18, 24:].sum((1, 2)) == 32
    kept = out1[:, 0, 10:18, :4].sum((1, 2)) == 32
    assert torch.equal(flipped, ~kept)
    assert 16 < int(flipped.sum()) < 48
