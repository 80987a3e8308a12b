"""Per-epoch checkpoints, written atomically by rank 0 and read by every rank on restart."""

from __future__ import annotations

import os
from pathlib import Path

import torch

CHECKPOINT_FILE = "checkpoint.pt"
# Settings that shape the network, optimizer and schedule: a checkpoint continues only a run
# with the same.
RESUME_KEYS = ("epochs", "lr", "optimizer", "scheduler", "batch_size", "train_limit", "batch_norm")
# What a checkpoint written before a setting existed was trained with.
SETTINGS_BEFORE_THEY_EXISTED = {"batch_norm": False}


def save(directory: str | Path, state: dict) -> Path:
    """Write ``checkpoint.pt`` via a temporary file and a rename, so it is never half-written."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    target = out / CHECKPOINT_FILE
    tmp = out / f".{CHECKPOINT_FILE}.{os.getpid()}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, target)
    return target


def load(directory: str | Path | None) -> dict | None:
    """The last checkpoint in ``directory``, or None when there is none yet."""
    if not directory:
        return None
    path = Path(directory) / CHECKPOINT_FILE
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)


class CheckpointMismatch(ValueError):
    """The checkpoint belongs to a run with other settings."""


def check_compatible(saved: dict, current: dict, steps_per_epoch: int) -> None:
    """Refuse to continue a checkpoint written by a run with another schedule.

    ``saved`` is the checkpoint, ``current`` this run's config. The steps per epoch also
    change with the world size or the dataset: the one-cycle schedule cannot stretch.

    Raises:
        CheckpointMismatch: names each differing setting and what to do instead.
    """
    differing = [
        f"--{key.replace('_', '-')} {_setting(saved, key)} (now {current[key]})"
        for key in RESUME_KEYS
        if _setting(saved, key) != current[key]
    ]
    saved_steps = saved.get("steps_per_epoch", steps_per_epoch)
    if not differing and saved_steps != steps_per_epoch:
        differing.append(
            f"{saved_steps} steps per epoch (now {steps_per_epoch}: another world size or data)"
        )
    if differing:
        raise CheckpointMismatch(
            "the checkpoint was written by a run with "
            + ", ".join(differing)
            + "; use the same settings to resume, or a fresh --checkpoint-dir"
        )


def _setting(saved: dict, key: str):
    return saved["config"].get(key, SETTINGS_BEFORE_THEY_EXISTED.get(key))
