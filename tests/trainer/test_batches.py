"""Sharding arithmetic, batching and augmentation, without a process group."""

import torch
from torch.utils.data import DistributedSampler

from trainer import batches, train
from trainer.config import TrainConfig
from trainer.data import CLASS_NAMES, ONE_WAY_CLASSES, load_packed
from trainer.distributed import Context


class RecordingStep:
    """Stands in for the training step: records the example indices it is given."""

    def __init__(self):
        self.loss_sum, self.seen = torch.zeros(()), []

    def __call__(self, index, flips):
        self.seen += index.tolist()


def test_shards_of_all_ranks_cover_the_data_once_per_epoch(packed_small, monkeypatch):
    """What each rank of a 3-process job trains on, through the Trainer's own epoch loop."""
    # No process group: each rank is built and run in turn in this process.
    monkeypatch.setattr(train, "DistributedDataParallel", lambda model: model)
    monkeypatch.setattr(train, "all_reduce_sum", lambda values, context: values)
    data = load_packed(packed_small)
    config = TrainConfig(train_limit=10, test_limit=9, batch_size=3, augment=False)

    def shards(epoch: int) -> list[list[int]]:
        seen = []
        for rank in range(3):
            trainer = train.Trainer(config, data, Context(rank, rank, 3, torch.device("cpu")))
            trainer.step = RecordingStep()
            trainer.run_epoch(epoch)
            seen.append(trainer.step.seen)
        return seen

    epoch_4, epoch_5 = shards(4), shards(5)
    for epoch in (epoch_4, epoch_5):
        assert [len(shard) for shard in epoch] == [4, 4, 4]  # 10 examples padded to 12
        assert sorted(set(sum(epoch, []))) == list(range(10))  # every example, every epoch
    assert epoch_4 != epoch_5  # reshuffled
    assert shards(4) == epoch_4  # the same seed, the same plan (a resumed job continues it)


def test_batch_arithmetic():
    assert batches.local_batch_size(128, 2) == 64
    assert batches.local_batch_size(1, 4) == 1
    assert batches.steps_per_epoch(60_000, 128, 2) == 469
    assert batches.steps_per_epoch(60_000, 32, 1) == 1875


def test_test_shards_are_disjoint_and_complete():
    parts = [batches.test_shard(10, rank, 3) for rank in range(3)]
    assert torch.cat(parts).tolist() == list(range(10))


def test_batches_follow_the_sampler():
    images = torch.arange(10, dtype=torch.float32).reshape(10, 1, 1, 1).expand(10, 1, 28, 28)
    labels = torch.arange(10)
    sampler = DistributedSampler(range(10), num_replicas=2, rank=1, seed=0)
    order, flips = batches.epoch_plan(sampler, None, torch.device("cpu"))
    assert order.tolist() == list(sampler) and flips is None
    got = list(batches.batch_slices(order, flips, batch_size=2))
    assert [len(index) for index, _ in got] == [2, 2, 1]
    assert torch.cat([index for index, _ in got]).tolist() == list(sampler)
    for index, flip in got:
        assert torch.equal(batches.gather(images, index, flip)[:, 0, 0, 0], labels[index].float())


def test_flips_mirror_about_half_deterministically():
    batch = torch.zeros(64, 1, 28, 28)
    batch[:, 0, 10:18, 0:4] = 1.0  # a bar at the left edge
    sampler = DistributedSampler(range(64), num_replicas=1, rank=0, shuffle=False)
    plans = [
        batches.epoch_plan(sampler, torch.Generator().manual_seed(3), torch.device("cpu"))
        for _ in range(2)
    ]
    assert torch.equal(plans[0][1], plans[1][1])
    order, flips = plans[0]
    out = batches.gather(batch, order, flips)
    flipped = out[:, 0, 10:18, 24:].sum((1, 2)) == 32
    kept = out[:, 0, 10:18, :4].sum((1, 2)) == 32
    assert torch.equal(flipped, flips) and torch.equal(flipped, ~kept)
    assert 16 < int(flipped.sum()) < 48


def test_shoes_are_never_flipped_and_the_rest_about_half():
    """Sandals, sneakers and ankle boots face one way in FashionMNIST: flips skip them."""
    labels = torch.arange(1000) % len(CLASS_NAMES)
    flippable = batches.flippable_examples(labels, list(CLASS_NAMES))
    assert [CLASS_NAMES[c] for c in range(10) if not flippable[c]] == list(ONE_WAY_CLASSES)
    sampler = DistributedSampler(range(1000), num_replicas=2, rank=1, seed=0)
    generator = torch.Generator().manual_seed(3)
    order, flips = batches.epoch_plan(sampler, generator, torch.device("cpu"), flippable)
    unmasked = batches.epoch_plan(sampler, torch.Generator().manual_seed(3), torch.device("cpu"))[1]
    one_way = ~flippable[order]
    assert not flips[one_way].any()
    assert torch.equal(flips[~one_way], unmasked[~one_way])  # the same draws otherwise
    assert 0.4 < flips[~one_way].float().mean() < 0.6
