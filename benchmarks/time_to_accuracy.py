"""Wall time until test accuracy >= 0.9039: our recipe vs the reference, same run, same device.

The reference is the article's setup (torchvision DataLoader, batch 32, SGD lr 0.01
momentum 0.9); ours is the trainer's default recipe, plus any variant given as trainer
flags with ``--ours``. All run in this process with the same threads and device, and
evaluate on the full test set after every epoch. They take turns an epoch at a time
(the reference's epoch 1, ours' epoch 1, the reference's epoch 2, ...), so a change in
the machine's speed (a shared machine's load) falls on all of them alike. Each clock
sums its own epochs: training and evaluation, not loading the files; ours also reports
the training time alone and its set-up (data to the device). Ours run ``--max-epochs``
epochs, the reference stops at the target.

    python -m benchmarks.time_to_accuracy --threads 2
    python -m benchmarks.time_to_accuracy --device cuda --ours "" --ours "--cuda-graphs"
"""

from __future__ import annotations

import argparse
import json
import shlex
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.reference_baseline import ReferenceRun, loaders, torchvision_root
from trainer import data
from trainer.config import parse_args as trainer_flags
from trainer.distributed import Context
from trainer.train import Trainer

TARGET = 0.9039

# One epoch of a contender: (training seconds, training + evaluation seconds, test accuracy).
Epoch = tuple[float, float, float]


def ours(dataset, flags: str, device: torch.device, max_epochs: int) -> tuple[float, Iterator]:
    """Our trainer with ``flags``: its set-up seconds and its epochs, run as they are drawn."""
    config = replace(
        trainer_flags(shlex.split(flags)), epochs=max_epochs, log_interval=10**9, device=device.type
    )
    started = time.perf_counter()
    trainer = Trainer(config, dataset, Context(0, 0, 1, device))
    return time.perf_counter() - started, _our_epochs(trainer, max_epochs)


def _our_epochs(trainer: Trainer, max_epochs: int) -> Iterator[Epoch]:
    for epoch in range(1, max_epochs + 1):
        started = time.perf_counter()
        trainer.run_epoch(epoch)  # ends reading the loss: the device is done
        trained = time.perf_counter()
        accuracy, _ = trainer.evaluate()
        yield trained - started, time.perf_counter() - started, accuracy


def reference(root: Path, device: torch.device, max_epochs: int) -> Iterator[Epoch]:
    """The article's loop, evaluated each epoch, until the target or ``max_epochs``."""
    train_loader, test_loader = loaders(root, device=device)
    run = ReferenceRun(device=device)
    for _ in range(max_epochs):
        started = time.perf_counter()
        run.train_epoch(train_loader)
        trained = time.perf_counter()
        accuracy, _ = run.evaluate(test_loader)
        yield trained - started, time.perf_counter() - started, accuracy
        if accuracy >= TARGET:
            return


def take_turns(contenders: dict[str, Iterator[Epoch]]) -> dict[str, list[tuple]]:
    """Run one epoch of each contender in turn until all are done.

    Returns each one's curve: (epoch, total seconds, training seconds, accuracy) rows.
    """
    curves = {name: [] for name in contenders}
    running = dict(contenders)
    while running:
        for name, epochs in list(running.items()):
            step = next(epochs, None)
            if step is None:
                del running[name]
                continue
            curve = curves[name]
            total, training = curve[-1][1:3] if curve else (0.0, 0.0)
            curve.append((len(curve) + 1, total + step[1], training + step[0], step[2]))
    return curves


def summarise(name: str, curve: list[tuple], setup_s: float) -> dict:
    """When the target was first reached (total and training-only seconds), and the best."""
    reached = next((row for row in curve if row[3] >= TARGET), None)
    return {
        "name": name,
        "setup_s": setup_s,
        "curve": curve,
        "target_epoch": reached[0] if reached else None,
        "target_s": reached[1] if reached else None,
        "target_training_s": reached[2] if reached else None,
        "best_accuracy": max(row[3] for row in curve),
    }


def describe(result: dict) -> str:
    steps = ", ".join(f"e{e} {total:.1f}s {acc:.4f}" for e, total, _, acc in result["curve"])
    when = "not reached"
    if result["target_s"] is not None:
        when = f"{result['target_s']:.2f} s (training {result['target_training_s']:.2f} s)"
    return (
        f"{result['name']:<34} target {when:<30} best {result['best_accuracy']:.4f}  "
        f"set-up {result['setup_s']:.2f} s  [{steps}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--max-epochs", type=int, default=10)
    parser.add_argument("--ours", action="append", help="trainer flags of one variant of ours")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dataset = data.load(args.data_dir)
    setups = {"reference": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        root = torchvision_root(Path(tmp), args.data_dir)
        contenders = {"reference": reference(root, device, args.max_epochs)}
        for flags in args.ours or [""]:
            name = f"ours {flags}".strip()
            setups[name], contenders[name] = ours(dataset, flags, device, args.max_epochs)
        curves = take_turns(contenders)
    results = [summarise(name, curve, setups[name]) for name, curve in curves.items()]
    where = torch.cuda.get_device_name() if device.type == "cuda" else f"threads={args.threads}"
    print(f"{where} target accuracy {TARGET}")
    for result in results:
        print(describe(result))
    base = results[0]["target_s"]
    for result in results[1:]:
        if result["target_s"] and base:
            print(f"ratio {result['name']}/reference: {result['target_s'] / base:.3f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": where, "results": results}, indent=2))


if __name__ == "__main__":
    main()
