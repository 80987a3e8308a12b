"""Wall time until test accuracy >= 0.9039: our recipe vs the reference, same run, same device.

The reference is the article's setup (torchvision DataLoader, batch 32, SGD lr 0.01
momentum 0.9); ours is the trainer's default recipe, plus any variant given as trainer
flags with ``--ours``. All run in this process with the same threads and device,
evaluate on the full test set after every epoch, and run ``--max-epochs`` epochs (the
reference stops at the target). The clock covers training and evaluation, not loading
the files; ours also reports the training time alone and its set-up (data to the device).

    python -m benchmarks.time_to_accuracy --threads 2
    python -m benchmarks.time_to_accuracy --device cuda --ours "" --ours "--cuda-graphs"
"""

from __future__ import annotations

import argparse
import json
import shlex
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.reference_baseline import ReferenceRun, loaders, torchvision_root
from trainer import data
from trainer.config import parse_args as trainer_flags
from trainer.distributed import Context
from trainer.train import Trainer

TARGET = 0.9039


def ours(dataset, flags: str, device: torch.device, max_epochs: int) -> dict:
    """Our trainer with ``flags``: set-up time, then per epoch training and total seconds."""
    config = replace(
        trainer_flags(shlex.split(flags)), epochs=max_epochs, log_interval=10**9, device=device.type
    )
    started = time.perf_counter()
    trainer = Trainer(config, dataset, Context(0, 0, 1, device))
    setup, curve, training = time.perf_counter() - started, [], 0.0
    started = time.perf_counter()
    for epoch in range(1, max_epochs + 1):
        begun = time.perf_counter()
        trainer.run_epoch(epoch)  # ends reading the loss: the device is done
        training += time.perf_counter() - begun
        accuracy, _ = trainer.evaluate()
        curve.append((epoch, time.perf_counter() - started, training, accuracy))
    return {"name": f"ours {flags}".strip(), "setup_s": setup, "curve": curve}


def reference(root: Path, device: torch.device, max_epochs: int) -> dict:
    """The article's loop, evaluated each epoch, until the target or ``max_epochs``."""
    train_loader, test_loader = loaders(root, device=device)
    run, started, curve, training = ReferenceRun(device=device), time.perf_counter(), [], 0.0
    for epoch in range(1, max_epochs + 1):
        begun = time.perf_counter()
        run.train_epoch(train_loader)
        training += time.perf_counter() - begun
        accuracy, _ = run.evaluate(test_loader)
        curve.append((epoch, time.perf_counter() - started, training, accuracy))
        if accuracy >= TARGET:
            break
    return {"name": "reference", "setup_s": 0.0, "curve": curve}


def summarise(result: dict) -> dict:
    """Add when the target was first reached (total and training-only seconds) and the best."""
    reached = next((row for row in result["curve"] if row[3] >= TARGET), None)
    return {
        **result,
        "target_epoch": reached[0] if reached else None,
        "target_s": reached[1] if reached else None,
        "target_training_s": reached[2] if reached else None,
        "best_accuracy": max(row[3] for row in result["curve"]),
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
    results = [ours(dataset, flags, device, args.max_epochs) for flags in args.ours or [""]]
    with tempfile.TemporaryDirectory() as tmp:
        root = torchvision_root(Path(tmp), args.data_dir)
        results.insert(0, reference(root, device, args.max_epochs))
    results = [summarise(result) for result in results]
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
