"""Training samples/s: our trainer vs the article's torchvision DataLoader, same run, same device.

The baseline is the reference script run the reference way: torchvision's FashionMNIST
with per-sample ToTensor, a ``DataLoader`` at batch 32 (on CUDA with one worker and pinned
memory, as the reference does), each batch copied to the device. Ours is the trainer's
default recipe, the trainer at batch 32 in fp32 (the data path alone), and on CUDA each
GPU switch turned off or on. Every variant runs in a fresh process, the variants
interleaved round by round, so none inherits another's allocator, compile cache or
thread-pool state. On CUDA each variant first trains ``--warmup`` untimed epochs
(set-up, cuDNN's first calls, compilation) and then times one epoch.

    python -m benchmarks.train_throughput --samples 20000 --threads 2
    python -m benchmarks.train_throughput --device cuda --samples 60000 --json out.json
"""

from __future__ import annotations

import argparse
import json
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

DATA_PATH_ONLY = dict(batch_size=32, augment=False, precision="fp32")
LARGE_BATCH = dict(batch_size=512, lr=0.008)  # see docs/benchmarks.md for the accuracy
# name -> (what it is, TrainConfig overrides; None for the reference loop)
VARIANTS = {
    "baseline": ("torchvision DataLoader, batch 32, fp32", None),
    "ours-32": ("trainer, batch 32, fp32, no flips", DATA_PATH_ONLY),
    "ours": ("trainer, default recipe", {}),
    "ours-host-data": ("default, splits in host memory", dict(device_data=False)),
    "ours-unfused": ("default, torch's default optimizer kernels", dict(fused_optimizer=False)),
    "ours-fp32": ("default in fp32", dict(precision="fp32")),
    "ours-graphs": ("default + CUDA graphs", dict(cuda_graphs=True)),
    "ours-compile": ("default + torch.compile", dict(compile=True)),
    "ours-graphs-512": ("CUDA graphs, batch 512, lr 0.008", dict(cuda_graphs=True, **LARGE_BATCH)),
}
DEFAULT_VARIANTS = {
    "cpu": ["baseline", "ours-32", "ours"],
    "cuda": [name for name in VARIANTS if name != "ours-compile"],
}


def ours(samples: int, data_dir: str | None, device: str, warmup: int, **overrides) -> float:
    """Samples/s of one epoch of the trainer over ``samples`` examples, after warm-up epochs."""
    config = TrainConfig(
        epochs=warmup + 1, train_limit=samples, log_interval=10**9, device=device, **overrides
    )
    context = Context(0, 0, 1, torch.device("cuda" if device == "cuda" else "cpu"))
    trainer = Trainer(config, data.load(data_dir), context)
    for epoch in range(1, warmup + 1):
        trainer.run_epoch(epoch)
    _, seconds = timed(trainer.run_epoch, warmup + 1)  # ends reading the loss: synchronised
    return samples / seconds


def baseline(samples: int, data_dir: str | None, device: str, warmup: int) -> float:
    """Samples/s of one epoch of the article's loop over ``samples`` examples."""
    device = torch.device(device)
    with tempfile.TemporaryDirectory() as tmp:
        root = torchvision_root(Path(tmp), data_dir)
        run = ReferenceRun(device=device)
        if warmup:
            run.train_epoch(loaders(root, train_limit=3200, device=device)[0])
        train_loader, _ = loaders(root, train_limit=samples, device=device)
        seen, seconds = timed(run.train_epoch, train_loader)
    return seen / seconds


def measure(args: argparse.Namespace) -> float:
    """Samples/s of one variant, in this process."""
    warmup = args.warmup if args.warmup is not None else int(args.device == "cuda")
    overrides = VARIANTS[args.variant][1]
    if overrides is None:
        return baseline(args.samples, args.data_dir, args.device, warmup)
    return ours(args.samples, args.data_dir, args.device, warmup, **overrides)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS))
    parser.add_argument("--warmup", type=int, help="untimed epochs (default: 1 on CUDA, else 0)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--repeats", type=int, default=3, help="rounds; the median is shown")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--variant", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    if args.variant:
        print(measure(args))
        return
    names = args.variants or DEFAULT_VARIANTS[args.device]
    runs = {name: [] for name in names}
    for _ in range(args.repeats):  # interleaved, so drift in machine speed hits all alike
        for name in names:
            runs[name].append(_run_variant(name, args))
    report(args, runs)


def report(args: argparse.Namespace, runs: dict[str, list[float | None]]) -> None:
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"{args.threads} threads"
    print(f"{where}, {args.samples} samples per run (s: their seconds), median of {args.repeats}")
    base = _median(runs.get("baseline", []))
    rows = {}
    for name, values in runs.items():
        rate = _median(values)
        ratio = rate / base if rate and base else None
        rows[name] = {"samples_per_s": rate, "ratio": ratio, "runs": values}
        spread = "/".join("failed" if v is None else f"{v:.0f}" for v in values)
        shown = "failed" if rate is None else f"{rate:10.0f} samples/s"
        times = f"  ratio {ratio:6.2f}x" if ratio else ""
        epoch = f"  {args.samples / rate:7.3f} s" if rate else ""
        print(f"{name:<16} {VARIANTS[name][0]:<42} {shown}{times}{epoch}  ({spread})")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": where, "variants": rows}, indent=2))


def _median(values: list[float | None]) -> float | None:
    values = [value for value in values if value is not None]
    return statistics.median(values) if values else None


def _run_variant(name: str, args: argparse.Namespace) -> float | None:
    command = [sys.executable, "-m", "benchmarks.train_throughput", "--variant", name]
    command += ["--samples", str(args.samples), "--threads", str(args.threads)]
    command += ["--device", args.device]
    if args.warmup is not None:
        command += ["--warmup", str(args.warmup)]
    if args.data_dir:
        command += ["--data-dir", args.data_dir]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:  # one broken variant must not hide the others' figures
        print(f"{name}: failed:\n{result.stderr[-2000:]}", file=sys.stderr)
        return None
    return float(result.stdout.split()[-1])


if __name__ == "__main__":
    main()
