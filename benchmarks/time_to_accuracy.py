"""Wall time until test accuracy >= 0.9039: our default recipe vs the reference, same run.

The reference is the article's setup (torchvision DataLoader, batch 32, SGD lr 0.01
momentum 0.9); ours is the trainer's default recipe. Both run in this process with the
same threads, evaluate on the full test set after every epoch, and stop at the target.
The clock covers training and evaluation, not loading the files.

    python -m benchmarks.time_to_accuracy --threads 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.reference_baseline import ReferenceRun, loaders, torchvision_root
from trainer import data
from trainer.config import TrainConfig
from trainer.distributed import Context
from trainer.train import Trainer

TARGET = 0.9039
CPU = Context(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))


def ours(dataset, max_epochs: int) -> tuple[float | None, list[tuple[int, float, float]]]:
    """(seconds to the target or None, [(epoch, seconds so far, accuracy)])."""
    trainer = Trainer(TrainConfig(epochs=max_epochs, log_interval=10**9), dataset, CPU)
    started, curve, reached = time.perf_counter(), [], None
    for metrics in trainer.fit():
        elapsed = time.perf_counter() - started
        curve.append((metrics["epoch"], elapsed, metrics["accuracy"]))
        if reached is None and metrics["accuracy"] >= TARGET:
            reached = elapsed
    return reached, curve


def reference(root: Path, max_epochs: int) -> tuple[float | None, list]:
    """The article's loop, evaluated each epoch, until the target or ``max_epochs``."""
    train_loader, test_loader = loaders(root)
    run, started, curve = ReferenceRun(), time.perf_counter(), []
    for epoch in range(1, max_epochs + 1):
        run.train_epoch(train_loader)
        accuracy, _ = run.evaluate(test_loader)
        elapsed = time.perf_counter() - started
        curve.append((epoch, elapsed, accuracy))
        if accuracy >= TARGET:
            return elapsed, curve
    return None, curve


def _describe(name: str, reached: float | None, curve: list) -> str:
    steps = ", ".join(f"e{epoch} {seconds:.0f}s {acc:.4f}" for epoch, seconds, acc in curve)
    when = f"{reached:.1f} s" if reached is not None else "not reached"
    return f"{name:<10} target {when:<12} best {max(a for *_, a in curve):.4f}  [{steps}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--max-epochs", type=int, default=10)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ours_time, ours_curve = ours(data.load(args.data_dir), args.max_epochs)
    with tempfile.TemporaryDirectory() as tmp:
        root = torchvision_root(Path(tmp), args.data_dir)
        ref_time, ref_curve = reference(root, args.max_epochs)
    print(f"threads={args.threads} target accuracy {TARGET}")
    print(_describe("reference", ref_time, ref_curve))
    print(_describe("ours", ours_time, ours_curve))
    if ours_time and ref_time:
        print(f"ratio ours/reference: {ours_time / ref_time:.2f}x")


if __name__ == "__main__":
    main()
