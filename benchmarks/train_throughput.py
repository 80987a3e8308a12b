"""Training samples/s: our trainer vs the article's torchvision DataLoader, same run.

Both train the same network in this process with the same number of threads; the
baseline is torchvision's FashionMNIST with per-sample ToTensor, batch 32. Ours is
the trainer's default recipe (in-memory batches, batch 128, augmentation on), and, to
separate the data path from the batch size, the trainer at batch 32 as well.

    python -m benchmarks.train_throughput --samples 20000 --threads 2
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from benchmarks.reference_baseline import ReferenceRun, loaders, timed, torchvision_root
from trainer import data
from trainer.config import TrainConfig
from trainer.distributed import Context
from trainer.train import Trainer

CPU = Context(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))


def ours(dataset, samples: int, **overrides) -> float:
    """Samples/s of one epoch of the trainer over ``samples`` examples."""
    config = TrainConfig(epochs=1, train_limit=samples, log_interval=10**9, **overrides)
    trainer = Trainer(config, dataset, CPU)
    _, seconds = timed(trainer.run_epoch, 1)
    return samples / seconds


def baseline(root: Path, samples: int) -> float:
    """Samples/s of one epoch of the article's loop over ``samples`` examples."""
    train_loader, _ = loaders(root, batch_size=32, train_limit=samples)
    seen, seconds = timed(ReferenceRun().train_epoch, train_loader)
    return seen / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dataset = data.load(args.data_dir)
    with tempfile.TemporaryDirectory() as tmp:
        base = baseline(torchvision_root(Path(tmp), args.data_dir), args.samples)
    ours_default = ours(dataset, args.samples)
    ours_32 = ours(dataset, args.samples, batch_size=32, augment=False)
    print(f"threads={args.threads} samples={args.samples}")
    print(f"baseline  torchvision DataLoader, batch 32: {base:8.0f} samples/s")
    print(
        f"ours      trainer, batch 32, no augment:   {ours_32:8.0f} samples/s"
        f"  ratio {ours_32 / base:.2f}x"
    )
    print(
        f"ours      trainer default recipe:          {ours_default:8.0f} samples/s"
        f"  ratio {ours_default / base:.2f}x"
    )


if __name__ == "__main__":
    main()
