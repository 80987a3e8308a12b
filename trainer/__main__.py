"""``python -m trainer``: train alone, under torchrun, or in a PyTorchJob/TrainJob pod."""

from __future__ import annotations

import sys

import torch

from trainer import data, distributed
from trainer.checkpoint import CheckpointMismatch
from trainer.config import parse_args
from trainer.train import Trainer


def main(argv: list[str] | None = None) -> int:
    """Parse flags, join the process group, train, and leave cleanly."""
    config = parse_args(argv)
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    try:
        dataset = data.load(config.data_dir)
        context = distributed.setup(config.device, config.backend)
    except (data.DataError, distributed.LaunchError) as exc:
        print(f"trainer: error: {exc}", file=sys.stderr)
        return 1
    try:
        if context.is_main:
            print(
                f"training on {context.world_size} process(es), device {context.device}, "
                f"{len(dataset.train.head(config.train_limit))} examples",
                flush=True,
            )
        Trainer(config, dataset, context).train()
    except CheckpointMismatch as exc:
        print(f"trainer: error: {config.checkpoint_dir}: {exc}", file=sys.stderr)
        return 1
    except distributed.LaunchError as exc:
        print(f"trainer: error: {exc}", file=sys.stderr)
        return 1
    finally:
        distributed.teardown(context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
