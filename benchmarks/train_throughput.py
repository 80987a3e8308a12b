"""Training samples/s: our trainer vs the article's torchvision DataLoader, same run.

Both train the same network with the same number of threads; the baseline is
torchvision's FashionMNIST with per-sample ToTensor, batch 32. Ours is the trainer's
default recipe (in-memory batches, batch 128, flips, bf16 autocast where native), and,
to separate the data path from the batch size, the trainer at batch 32 in fp32 too.
Each variant runs in a fresh process, one after the other, so none inherits another's
allocator or thread-pool state.

    python -m benchmarks.train_throughput --samples 20000 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks.reference_baseline import ReferenceRun, loaders, timed, torchvision_root
from trainer import data
from trainer.config import TrainConfig
from trainer.distributed import Context
from trainer.train import Trainer

CPU = Context(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))
VARIANTS = {
    "baseline": "torchvision DataLoader, batch 32, fp32",
    "ours-32": "trainer, batch 32, fp32, no flips",
    "ours": "trainer, default recipe",
}


def ours(samples: int, data_dir: str | None, **overrides) -> float:
    """Samples/s of one epoch of the trainer over ``samples`` examples."""
    config = TrainConfig(epochs=1, train_limit=samples, log_interval=10**9, **overrides)
    trainer = Trainer(config, data.load(data_dir), CPU)
    _, seconds = timed(trainer.run_epoch, 1)
    return samples / seconds


def baseline(samples: int, data_dir: str | None) -> float:
    """Samples/s of one epoch of the article's loop over ``samples`` examples."""
    with tempfile.TemporaryDirectory() as tmp:
        train_loader, _ = loaders(torchvision_root(Path(tmp), data_dir), train_limit=samples)
        seen, seconds = timed(ReferenceRun().train_epoch, train_loader)
    return seen / seconds


def measure(variant: str, samples: int, data_dir: str | None) -> float:
    """Samples/s of one variant, in this process."""
    if variant == "baseline":
        return baseline(samples, data_dir)
    if variant == "ours-32":
        return ours(samples, data_dir, batch_size=32, augment=False, precision="fp32")
    return ours(samples, data_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--repeats", type=int, default=3, help="rounds; the median is shown")
    parser.add_argument("--variant", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.variant:
        print(measure(args.variant, args.samples, args.data_dir))
        return
    runs = {variant: [] for variant in VARIANTS}
    for _ in range(args.repeats):  # interleaved, so drift in machine speed hits all alike
        for variant in VARIANTS:
            runs[variant].append(_run_variant(variant, args))
    rates = {variant: statistics.median(values) for variant, values in runs.items()}
    print(f"threads={args.threads} samples={args.samples} median of {args.repeats}")
    for variant, label in VARIANTS.items():
        ratio = rates[variant] / rates["baseline"]
        spread = "/".join(f"{value:.0f}" for value in runs[variant])
        print(
            f"{variant:<9} {label:<40} {rates[variant]:8.0f} samples/s  ratio {ratio:.2f}x"
            f"  ({spread})"
        )


def _run_variant(variant: str, args: argparse.Namespace) -> float:
    command = [sys.executable, "-m", "benchmarks.train_throughput", "--variant", variant]
    command += ["--samples", str(args.samples), "--threads", str(args.threads)]
    if args.data_dir:
        command += ["--data-dir", args.data_dir]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return float(output.split()[-1])


if __name__ == "__main__":
    main()
