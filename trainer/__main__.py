"""``python -m trainer``: train alone, under torchrun, or in a PyTorchJob/TrainJob pod.

Exit status: 0 when the model is trained, 1 when training diverged or the launch failed,
2 for bad flags, paths or data (each a one-line error).
"""

from __future__ import annotations

import sys

import torch

from trainer import data, distributed
from trainer.checkpoint import CheckpointMismatch
from trainer.config import parse_args
from trainer.paths import PathError, check_paths
from trainer.train import Diverged, Trainer


def main(argv: list[str] | None = None) -> int:
    """Parse flags, check paths, join the process group, train, and leave cleanly."""
    config = parse_args(argv)
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    try:
        check_paths(config)
        dataset = data.load(config.data_dir)
    except (PathError, data.DataError) as exc:
        return _error(exc, 2)
    try:
        context = distributed.setup(config.device, config.backend)
    except distributed.LaunchError as exc:
        return _error(exc, 1)
    try:
        if context.is_main:
            print(
                f"training on {context.world_size} process(es), device {context.device}, "
                f"{len(dataset.train.head(config.train_limit))} examples"
                + (f", {torch.get_num_threads()} CPU thread(s) each" if config.num_threads else ""),
                flush=True,
            )
        Trainer(config, dataset, context).train()
    except CheckpointMismatch as exc:
        return _error(f"{config.checkpoint_dir}: {exc}", 1)
    except Diverged as exc:  # every rank saw the same reduced loss: rank 0 says it once
        return _error(exc, 1) if context.is_main else 1
    except distributed.LaunchError as exc:
        return _error(exc, 1)
    finally:
        distributed.teardown(context)
    return 0


def _error(message: object, code: int) -> int:
    print(f"trainer: error: {message}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
